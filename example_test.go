package redlease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
)

// exampleRedis starts an embedded Redis for the examples. In production,
// pass your own go-redis client (plain, failover or cluster).
func exampleRedis() (redis.UniversalClient, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

func Example() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	locks := redlease.New(rdb, redlease.WithTTL(30*time.Second))

	lease, err := locks.Acquire(ctx, "tenant:42:billing")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding", lease.Resource(), "with fence", lease.Fence())

	// Someone else trying at the same time is told the lease is busy.
	_, err = locks.TryAcquire(ctx, "tenant:42:billing")
	fmt.Println("second try busy:", errors.Is(err, redlease.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", context.Cause(lease.Context()))
	// Output:
	// holding tenant:42:billing with fence 1
	// second try busy: true
	// released: redlease: lease released
}

// Do the protected work under the lease's context: it ends when the lease is
// lost, could not be renewed in time, or was released.
func ExampleLease_Context() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := redlease.New(rdb)

	lease, err := locks.Acquire(context.Background(), "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	ctx := lease.Context()
	for step := 1; step <= 3; step++ {
		if err := ctx.Err(); err != nil { // check between steps that cannot be undone
			fmt.Println("stopping:", context.Cause(ctx))
			return
		}
		fmt.Println("step", step)
	}
	// Output:
	// step 1
	// step 2
	// step 3
}

// account is a stand-in for the protected resource: it remembers the newest
// fence it accepted, and who presented it, and in the same step as the write
// refuses an older fence, or the same fence from another owner (after a
// failover two holders can draw one fence). Package fencing's guards do the
// same for SQL, Redis and HTTP.
type account struct {
	lastFence int64
	lastOwner string
	balance   int
}

func (a *account) charge(fence int64, owner string, amount int) error {
	if fence < a.lastFence || fence == a.lastFence && owner != a.lastOwner {
		return fmt.Errorf("stale fence %d, newest accepted is %d", fence, a.lastFence)
	}
	a.lastFence, a.lastOwner, a.balance = fence, owner, a.balance-amount
	return nil
}

// Pass the fence with every write, and let the resource reject a holder that
// went stale: here A paused past its TTL while B took over.
func ExampleLease_Fence() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)
	acct := &account{balance: 100}

	a, err := locks.Acquire(ctx, "account:7")
	if err != nil {
		log.Fatal(err)
	}
	if err := a.Release(ctx); err != nil { // stands in for A's lease expiring while A was paused
		log.Fatal(err)
	}
	b, err := locks.Acquire(ctx, "account:7")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)

	fmt.Println("B:", acct.charge(b.Fence(), b.Owner(), 30), "balance", acct.balance)
	fmt.Println("A:", acct.charge(a.Fence(), a.Owner(), 30), "balance", acct.balance)
	// Output:
	// B: <nil> balance 70
	// A: stale fence 1, newest accepted is 2 balance 70
}

// Do runs a function under a lease and releases it on every path.
func ExampleClient_Do() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := redlease.New(rdb)

	err := locks.Do(context.Background(), "nightly-report", func(ctx context.Context, l *redlease.Lease) error {
		fmt.Println("running with fence", l.Fence())
		return nil
	}, redlease.WithMaxWait(time.Second), redlease.WithMaxHold(time.Hour))
	fmt.Println("err:", err)
	// Output:
	// running with fence 1
	// err: <nil>
}

// AcquireAll takes several leases at once, or none, each with its own fence.
func ExampleClient_AcquireAll() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)

	leases, err := locks.AcquireAll(ctx, []string{"account:1", "account:2"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range leases {
		fmt.Println(l.Resource(), l.Fence())
		defer l.Release(ctx)
	}
	// Output:
	// account:1 1
	// account:2 1
}

// A singleton worker: campaign, lead until the term ends, resign.
func ExampleElection() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	election := redlease.NewElection(redlease.New(rdb), "cron-runner", redlease.WithTTL(10*time.Second))

	term, err := election.Campaign(ctx, "host-a") // waits until elected
	if err != nil {
		log.Fatal(err)
	}
	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s, term fence %d\n", leader.Value, term.Fence())

	// Lead: run jobs under term.Context(), which ends if leadership is lost;
	// pass term.Fence() with every write. Then resign:
	if err := election.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = election.Leader(ctx)
	fmt.Println(err)
	// Output:
	// leader host-a, term fence 1
	// redlease: no leader
}

// Run is the whole loop: campaign, lead, resign, campaign again, until its
// context ends. Here a singleton worker steps down after each batch; on
// another host the same code waits for its turn.
func ExampleElection_Run() {
	rdb, stop := exampleRedis()
	defer stop()
	election := redlease.NewElection(redlease.New(rdb), "singleton-worker")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	batches := []string{"batch-1", "batch-2", "batch-3"}
	err := election.Run(ctx, func(ctx context.Context) error {
		// Work under ctx, which ends with the term; fence every write.
		fmt.Printf("%s with fence %d\n", batches[0], election.Term().Fence())
		if batches = batches[1:]; len(batches) == 0 {
			cancel() // shut down: Run resigns and returns
		}
		return nil // done with this term: Run resigns and campaigns again
	})
	fmt.Println("stopped:", errors.Is(err, context.Canceled))
	_, err = election.Leader(context.Background())
	fmt.Println(err)
	// Output:
	// batch-1 with fence 1
	// batch-2 with fence 2
	// batch-3 with fence 3
	// stopped: true
	// redlease: no leader
}

// A polite handover before a rolling update: the leader steps down at its
// next renewal, and the replica it names leads next.
func ExampleElection_Handover() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	ttl := redlease.WithTTL(300 * time.Millisecond) // renewals every 100 ms
	first := redlease.NewElection(redlease.New(rdb), "shard-7", ttl)
	second := redlease.NewElection(redlease.New(rdb), "shard-7", ttl)

	term, err := first.Campaign(ctx, "replica-1")
	if err != nil {
		log.Fatal(err)
	}
	elected := make(chan *redlease.Lease)
	go func() {
		next, err := second.Campaign(ctx, "replica-2")
		if err != nil {
			log.Fatal(err)
		}
		elected <- next
	}()

	// replica-1 is about to be updated: it hands over to replica-2.
	if err := first.Handover(ctx, "replica-2"); err != nil {
		log.Fatal(err)
	}
	<-term.Context().Done() // at its next renewal
	fmt.Println("replica-1 stepped down:", errors.Is(context.Cause(term.Context()), redlease.ErrHandover))
	_ = first.Resign(ctx) // free the name now, not when the TTL runs out

	next := <-elected
	leader, err := second.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader: %s, with a larger fence: %v\n", leader.Value, next.Fence() > term.Fence())
	_ = second.Resign(ctx)
	// Output:
	// replica-1 stepped down: true
	// leader: replica-2, with a larger fence: true
}

// A liveness probe: 200 while this process is a healthy campaigner, 503
// while it leads but its term's renewals are more than 5 s late.
func ExampleElection_HealthHandler() {
	rdb, stop := exampleRedis()
	defer stop()
	election := redlease.NewElection(redlease.New(rdb), "cron-runner")

	mux := http.NewServeMux()
	mux.Handle("/healthz", election.HealthHandler(5*time.Second))

	probe := httptest.NewRecorder()
	mux.ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	fmt.Println(probe.Code, probe.Body.String())
	// Output:
	// 200 ok
}

// At most N holders at once: each holds a numbered permit, whose fence rises
// with every new holder of that permit (fence by fencing.Key).
func ExampleClient_AcquireSemaphore() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)

	var held []*redlease.Lease
	for range 2 {
		l, err := locks.AcquireSemaphore(ctx, "payment-provider", 2)
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, l)
		fmt.Println("permit", l.Permit(), "fence", l.Fence())
	}
	_, err := locks.TryAcquireSemaphore(ctx, "payment-provider", 2)
	fmt.Println("a third caller:", errors.Is(err, redlease.ErrNotAcquired))
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// permit 0 fence 1
	// permit 1 fence 2
	// a third caller: true
}

// Many readers or one writer; a waiting writer goes before new readers.
func ExampleClient_AcquireWrite() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)

	r1, err := locks.AcquireRead(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := locks.AcquireRead(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locks.TryAcquireWrite(ctx, "config")
	fmt.Println("writer while two read:", errors.Is(err, redlease.ErrNotAcquired))
	if err := errors.Join(r1.Release(ctx), r2.Release(ctx)); err != nil {
		log.Fatal(err)
	}
	w, err := locks.AcquireWrite(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer's fence above the readers':", w.Fence() > r2.Fence())
	if err := w.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// writer while two read: true
	// writer's fence above the readers': true
}

// A parent process hands its lease to the child it starts, and exits: the
// child takes the lease up by its token, with the same fence, renews it and
// releases it. Here the two are Clients of one process, and the token
// travels in a map that stands in for the child's environment
// (cmd.Env = append(os.Environ(), "IMPORT_LEASE="+token) in the parent,
// os.Getenv("IMPORT_LEASE") in the child).
func ExampleClient_Resume() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	env := map[string]string{}

	// The parent.
	parent := redlease.New(rdb)
	lease, err := parent.Acquire(ctx, "nightly-import")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx) // after Handoff, releases nothing: the lease is the child's
	env["IMPORT_LEASE"] = lease.Token().String()
	// ... start the child with env ...
	if err := lease.Handoff(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("parent handed off fence", lease.Fence(), "and exits:", context.Cause(lease.Context()))
	if err := parent.Close(ctx); err != nil { // leaves the lease in Redis
		log.Fatal(err)
	}

	// The child.
	child := redlease.New(rdb)
	defer child.Close(ctx)
	token, err := redlease.ParseToken(env["IMPORT_LEASE"])
	if err != nil {
		log.Fatal(err)
	}
	resumed, err := child.Resume(ctx, token)
	if err != nil {
		log.Fatal(err) // errors.Is(err, redlease.ErrLeaseLost): too late, the lease has gone
	}
	fmt.Println("child holds", resumed.Resource(), "with fence", resumed.Fence())
	fmt.Println("renewed:", resumed.Refresh(ctx))
	fmt.Println("released:", resumed.Release(ctx))
	// Output:
	// parent handed off fence 1 and exits: redlease: "nightly-import": lease handed off
	// child holds nightly-import with fence 1
	// renewed: <nil>
	// released: <nil>
}

// A job that learns it will run longer than its TTL asks for a longer one;
// in its last, quick step it may ask for a shorter one, so that the
// resource is not blocked for long should the process die.
func ExampleLease_Extend() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)

	lease, err := locks.TryAcquire(ctx, "reports:monthly", redlease.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The export turns out to be large: an hour per period from now on.
	if err := lease.Extend(ctx, time.Hour); err != nil {
		log.Fatal(err) // ErrLeaseLost: stop the work
	}
	st, _ := locks.Inspect(ctx, "reports:monthly")
	fmt.Println("TTL in Redis:", st.Remaining.Round(time.Minute))
	fmt.Println("local deadline within:", time.Until(lease.Deadline()).Round(time.Minute))

	// The last step takes seconds: a 10 s TTL from now on.
	if err := lease.Extend(ctx, 10*time.Second); err != nil {
		log.Fatal(err)
	}
	st, _ = locks.Inspect(ctx, "reports:monthly")
	fmt.Println("TTL in Redis:", st.Remaining.Round(time.Second))
	fmt.Println("same fence:", lease.Fence())
	// Output:
	// TTL in Redis: 1h0m0s
	// local deadline within: 53m0s
	// TTL in Redis: 10s
	// same fence: 1
}
