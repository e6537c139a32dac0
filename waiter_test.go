package redlease

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// queued returns the owner tokens waiting on resource, in queue order.
func queued(t *testing.T, rdb redis.UniversalClient, resource string) []string {
	t.Helper()
	owners, err := rdb.ZRange(context.Background(), "redlease:{"+resource+"}:queue", 0, -1).Result()
	require.NoError(t, err)
	return owners
}

type acquired struct {
	l   *Lease
	err error
}

func TestMaxWait(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Acquire(t.Context(), "r", WithMaxWait(300*time.Millisecond))
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.NoError(t, l.Release(t.Context()))
}

// Waiters that arrive within one millisecond still queue in arrival order,
// not in the order of their random owner tokens. (Arrival was once recorded
// in ms, and a later waiter with a smaller token went first: with two fair
// contenders, about one handoff in a hundred took a millisecond more.)
func TestWaitersArrivingInOneMillisecondKeepTheirOrder(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	c := New(rdb)
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	k := wire.KeysOf(DefaultPrefix, "r")
	require.NoError(t, rdb.ScriptLoad(ctx, wire.Named("acquire.lua").Source()).Err())
	for round := range 20 {
		// Members in reverse lexical order, sent back to back in one pipeline:
		// the scripts run within microseconds of each other.
		members := []string{fmt.Sprintf("z%d/c", round), fmt.Sprintf("y%d/c", round), fmt.Sprintf("x%d/c", round)}
		pipe := rdb.Pipeline()
		for _, m := range members {
			owner := m[:len(m)-2]
			pipe.EvalSha(ctx, wire.Named("acquire.lua").Hash(), []string{k.Lease, k.Fence, k.Queue, k.Alive}, owner, 10000, "60000", m)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, members, queued(t, rdb, "r")[3*round:], "round %d", round)
	}
	require.NoError(t, l.Release(ctx))
}

// An acquire whose reply arrives after Close began is given back, not handed
// out: Close could not have released it.
func TestAcquireRacingCloseIsGivenBack(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	// Close begins while the acquire script is on its way.
	rdb.AddHook(closeAfterSend{c: c})
	_, err := c.TryAcquire(t.Context(), "r")
	require.ErrorIs(t, err, ErrClientClosed)
	require.ErrorIs(t, err, ErrNotAcquired)
	servertest.WaitFor(t, 5*time.Second, func() bool { return rdb.Exists(t.Context(), "redlease:{r}:lease").Val() == 0 }) // released by owner
}

// closeAfterSend closes c right after the first EVALSHA has been answered,
// before the Client sees the reply.
type closeAfterSend struct{ c *Client }

func (h closeAfterSend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h closeAfterSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h closeAfterSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.c.mu.Lock()
			h.c.closed.Store(true) // what Close does first
			h.c.mu.Unlock()
		}
		return err
	}
}

// A wait rides out a Redis that answers that it runs nothing now (LOADING
// after a restart, and the like), as it rides out one it cannot reach; a
// TryAcquire says the request was not run. (The wait gave up at the first
// such answer.)
func TestWaitRidesOutARedisThatIsLoading(t *testing.T) {
	for _, reply := range []string{
		"LOADING Redis is loading the dataset in memory",
		"READONLY You can't write against a read only replica.",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
	} {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			mr, rdb := servertest.Mini(t)
			c := New(rdb)
			defer c.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mr.SetError(reply)
			_, err := c.TryAcquire(ctx, "r")
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrOutcomeUnknown, "the request was not run")
			got := make(chan error, 1)
			go func() {
				l, err := c.Acquire(ctx, "r")
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(1500 * time.Millisecond) // longer than go-redis's own retries
			mr.SetError("")
			require.NoError(t, servertest.Recv(t, got, 15*time.Second))
		})
	}
}

// A wait whose context ends while an attempt is on its way, after Redis
// answered that another owner holds the lease, is not acquired
// (ErrNotAcquired and the context's error, the attempt's outcome unknown),
// not unavailable: Redis answered. (It was ErrUnavailable, as if Redis had
// answered none of its requests, whenever the end met an attempt rather
// than the sleep between two: TestIntegrationWaiterThatGivesUpLeavesTheQueue
// failed now and then.)
func TestWaitEndedDuringAnAttemptIsNotUnavailable(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	held, err := New(rdb).TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	defer held.Release(t.Context())

	waitRdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = waitRdb.Close() })
	hold := &holdSecondScript{}
	waitRdb.AddHook(hold)
	c := New(waitRdb)
	defer c.Close(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "r")
		got <- err
	}()
	servertest.WaitFor(t, 10*time.Second, func() bool { return hold.scripts.Load() >= 2 }) // the second attempt is on its way
	cancel()
	err = servertest.Recv(t, got, 10*time.Second)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrUnavailable, "Redis answered the first attempt")
}

// holdSecondScript holds a client's second script until its context ends,
// as if its reply were on its way, and lets the others through.
type holdSecondScript struct{ scripts atomic.Int64 }

func (h *holdSecondScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdSecondScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdSecondScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && h.scripts.Add(1) == 2 {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

// A client library that keeps a context's deadline on its socket (rueidis
// and valkey-go on a connection used for one request at a time, go-redis
// with ContextTimeoutEnabled) reports the deadline when the socket's
// deadline fires, which can be a moment before the context's own timer ends
// the context: as context.DeadlineExceeded (rueidis, valkey-go) or as the
// socket's timeout (go-redis). A wait whose check of Redis failed so still
// ends as an outage, not as a plain deadline that says nothing of Redis.
// (On CI, rueidis against a Redis whose replies were 4 s late: AcquireAll
// returned "lease not acquired: context deadline exceeded", without
// ErrUnavailable.)
func TestWaitEndedByTheLibrarysDeadlineIsAnOutage(t *testing.T) {
	for name, libErr := range map[string]error{
		"context.DeadlineExceeded": context.DeadlineExceeded,
		"the socket's timeout":     &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
	} {
		t.Run(name, func(t *testing.T) {
			_, rdb := servertest.Mini(t)
			ctx := &lateDeadline{deadline: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
			rdb.AddHook(deadlineOnCheck{ctx, libErr})
			c := New(rdb)
			defer c.Close(context.Background())
			_, err := c.AcquireAll(ctx, []string{"a", "b"})
			require.ErrorIs(t, err, ErrUnavailable)
			require.ErrorIs(t, err, libErr)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, ErrNotAcquired, "nobody is known to hold it")
		})
	}
}

// lateDeadline is a context whose deadline has passed and whose own timer
// runs late: after the client library has reported the deadline
// (libraryTimedOut), Err says nil once more, and DeadlineExceeded from then
// on.
type lateDeadline struct {
	deadline time.Time
	done     chan struct{}

	mu    sync.Mutex
	state int // 0: before the library's timeout; 1: Err's last nil; 2: ended
}

func (c *lateDeadline) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *lateDeadline) Done() <-chan struct{}       { return c.done }
func (c *lateDeadline) Value(any) any               { return nil }

func (c *lateDeadline) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case 0:
		return nil
	case 1:
		c.state = 2
		close(c.done)
		return nil
	}
	return context.DeadlineExceeded
}

func (c *lateDeadline) libraryTimedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == 0 {
		c.state = 1
	}
}

// deadlineOnCheck fails the check that Redis answers (EXISTS) with err, as
// the library's socket deadline at ctx's deadline would.
type deadlineOnCheck struct {
	ctx *lateDeadline
	err error // the library's
}

func (h deadlineOnCheck) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h deadlineOnCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h deadlineOnCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "exists" {
			return next(ctx, cmd)
		}
		h.ctx.libraryTimedOut()
		cmd.SetErr(h.err)
		return h.err
	}
}
