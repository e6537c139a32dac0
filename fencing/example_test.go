package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
)

// The examples of the SQL guards, SQLGuard and RowGuard, need an SQL driver,
// which this module does not require: they are Example_sqlGuard and
// Example_rowGuard in the tests module (tests/fencing_example_test.go).

// exampleRedis starts an embedded Redis for an example.
func exampleRedis() (redis.UniversalClient, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

// acquire takes a lease for an example, or stops it.
func acquire(ctx context.Context, locks *redlease.Client, resource string) *redlease.Lease {
	l, err := locks.Acquire(ctx, resource)
	check(err)
	return l
}

// check stops an example on an error it does not expect.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// Fenced writes to data kept in Redis: the check and the write are one
// script, on the data's Redis.
func ExampleRedisGuard() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)
	guard := fencing.NewRedisGuard(rdb) // the data may live on another Redis

	a := acquire(ctx, locks, "report:7")
	check(a.Release(ctx)) // stands in for A pausing past its TTL
	b := acquire(ctx, locks, "report:7")
	defer b.Release(ctx)

	fmt.Println("B:", guard.Set(ctx, "{report:7}:body", "written by B", 0, b.Fence(), b.Owner()))
	fmt.Println("A:", guard.Set(ctx, "{report:7}:body", "written by A", 0, a.Fence(), a.Owner()))
	body, err := rdb.Get(ctx, "{report:7}:body").Result()
	check(err)
	fmt.Println("body:", body)
	// Output:
	// B: <nil>
	// A: redlease: stale fence 1 for "{report:7}:body": newest accepted is 2
	// body: written by B
}

// A write of your own behind the fence check: the body sees its own KEYS and
// ARGV, and runs only if the fence is admitted.
func ExampleNewScript() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	withdraw := fencing.NewScript(`
local balance = tonumber(redis.call('GET', KEYS[1]) or '0')
if balance < tonumber(ARGV[1]) then
  return redis.error_reply('insufficient funds')
end
return redis.call('DECRBY', KEYS[1], ARGV[1])`)
	rdb.Set(ctx, "{acct:9}:balance", 100, 0)

	left, err := withdraw.Run(ctx, rdb, []string{"{acct:9}:balance"}, 5, "owner-B", 30).Int64()
	fmt.Println(left, err)
	_, err = withdraw.Run(ctx, rdb, []string{"{acct:9}:balance"}, 4, "owner-A", 30).Int64()
	fmt.Println(errors.Is(err, fencing.ErrStaleFence))
	// Output:
	// 70 <nil>
	// true
}

// A gateway in front of a service that cannot check fences: the holder sends
// its token in headers, the gateway answers 409 to a stale one.
func ExampleHTTPGuard() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)

	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "paid") // the legacy service's write
	})
	guard := fencing.HTTPGuard{Store: &fencing.MemoryStore{}}
	gateway := httptest.NewServer(guard.Wrap(pay))
	defer gateway.Close()

	send := func(lease *redlease.Lease) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway.URL+"/pay", nil)
		check(err)
		fencing.SetHeaders(req.Header, lease)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		check(err)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}

	a := acquire(ctx, locks, "invoice:42")
	check(a.Release(ctx)) // stands in for A pausing past its TTL
	b := acquire(ctx, locks, "invoice:42")
	defer b.Release(ctx)
	send(b)
	send(a)
	// Output:
	// 200 paid
	// 409 redlease: stale fence 1 for "invoice:42": newest accepted is 2
}

// Repair after the fence counter went back (here: the lock's Redis was
// flushed): every new holder is refused until the counter is moved past the
// newest fence the resource accepted.
func ExampleStaleFenceError() {
	lockRdb, stopLocks := exampleRedis()
	defer stopLocks()
	dataRdb, stopData := exampleRedis()
	defer stopData()
	ctx := context.Background()
	locks := redlease.New(lockRdb)
	guard := fencing.NewRedisGuard(dataRdb)
	write := func() error {
		lease, err := locks.Acquire(ctx, "report:7")
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		return guard.Set(ctx, "{report:7}:body", "text", 0, lease.Fence(), lease.Owner())
	}

	for range 3 {
		check(write())
	}
	lockRdb.FlushAll(ctx) // the counter is lost, as in a restart without persistence

	err := write()
	fmt.Println(err)
	var stale *fencing.StaleFenceError
	if errors.As(err, &stale) {
		n, err := locks.AdvanceFence(ctx, "report:7", stale.Newest)
		check(err)
		fmt.Println("counter advanced to", n)
	}
	fmt.Println("next write:", write())
	// Output:
	// redlease: stale fence 1 for "{report:7}:body": newest accepted is 3
	// counter advanced to 3
	// next write: <nil>
}

// A semaphore's permit holders are fenced per permit, by Key: a holder that
// paused past its TTL is refused once its permit went to someone else, while
// the holders of other permits write on.
func ExampleKey() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)
	guard := fencing.NewRedisGuard(rdb)
	write := func(l *redlease.Lease) error {
		// One data key per permit, in the resource's hash slot.
		return guard.Set(ctx, "{calls}:"+fencing.Key(l), "in use", 0, l.Fence(), l.Owner())
	}

	a, err := locks.AcquireSemaphore(ctx, "calls", 2)
	check(err)
	other, err := locks.AcquireSemaphore(ctx, "calls", 2)
	check(err)
	check(write(a))
	check(a.Release(ctx)) // stands in for A's permit lapsing while A was paused
	b, err := locks.AcquireSemaphore(ctx, "calls", 2)
	check(err)
	fmt.Println("B got A's permit:", b.Permit() == a.Permit(), fencing.Key(b))
	check(write(b))
	fmt.Println("A:", write(a))
	fmt.Println("the other permit's holder:", write(other))
	check(errors.Join(b.Release(ctx), other.Release(ctx)))
	// Output:
	// B got A's permit: true calls#0
	// A: redlease: stale fence 1 for "{calls}:calls#0": newest accepted is 3
	// the other permit's holder: <nil>
}
