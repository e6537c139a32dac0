package wire

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/driver"
)

// keyServer answers every call with its first key, and holds the calls
// sent alone while held is open; it records the pipelines and whether the
// context each was sent with had ended. The rest is fakeServer's.
type keyServer struct {
	fakeServer
	held    chan struct{} // closed: calls sent alone go through
	entered chan struct{} // a call sent alone is held (buffered)

	mu        sync.Mutex
	pipelines [][]string // the keys of each pipeline's calls
	ended     []bool     // whether each pipeline's context had ended
}

func (s *keyServer) Eval(_ context.Context, c driver.Call) driver.Reply {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.held
	return driver.Reply{Value: c.Keys[0]}
}

func (s *keyServer) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	var keys []string
	for i, c := range calls {
		keys = append(keys, c.Keys[0])
		replies[i] = driver.Reply{Value: c.Keys[0]}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipelines = append(s.pipelines, keys)
	s.ended = append(s.ended, ctx.Err() != nil)
}

func (s *keyServer) EvalWait(ctx context.Context, c driver.Call, _ int, _ time.Duration) (driver.Reply, int64) {
	return s.Eval(ctx, c), 0
}

// gatedCtx is a context that its caller cancels while the call that uses
// it waits between being queued and waiting for its turn: its first Done
// waits until let is closed.
type gatedCtx struct {
	context.Context // Background: no deadline, no values
	asked           chan struct{}
	let             chan struct{}
	once            sync.Once

	mu   sync.Mutex
	err  error
	done chan struct{}
}

func (c *gatedCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		close(c.asked)
		<-c.let
	})
	return c.done
}

func (c *gatedCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *gatedCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = context.Canceled
	close(c.done)
}

// The call chosen to send a batch still sends it when its own context ends
// meanwhile: the other calls of the batch get their replies, and the
// pipeline goes out without the sender's cancellation. Whether the sender
// then sees its turn or its context's end first is up to the runtime (both
// are ready): the rounds cover both.
func TestBatchSenderWhoseContextEndsStillSendsIt(t *testing.T) {
	s := NewScript("return KEYS[1]")
	for round := range 20 {
		srv := &keyServer{held: make(chan struct{}), entered: make(chan struct{}, 1)}
		c := NewConn(srv, 1)
		run := func(ctx context.Context, key string) <-chan driver.Reply {
			out := make(chan driver.Reply, 1)
			go func() { out <- c.Run(ctx, Call{Script: s, Keys: []string{key}}) }()
			return out
		}
		inFlight := run(context.Background(), "in flight")
		<-srv.entered
		sender := &gatedCtx{Context: context.Background(), asked: make(chan struct{}), let: make(chan struct{}), done: make(chan struct{})}
		sent := run(sender, "sender")
		<-sender.asked // queued first, without a deadline: it sends the batch
		other := run(context.Background(), "other")
		for c.Queued() != 2 {
			time.Sleep(time.Millisecond)
		}
		sender.cancel()
		close(srv.held) // the request in flight returns and hands the batch to the sender
		for c.Queued() != 0 {
			time.Sleep(time.Millisecond)
		}
		close(sender.let)

		for name, ch := range map[string]<-chan driver.Reply{"in flight": inFlight, "sender": sent, "other": other} {
			select {
			case r := <-ch:
				if r.Err != nil || r.Value != name {
					t.Fatalf("round %d: the %s call got %+v", round, name, r)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the %s call got no reply", round, name)
			}
		}
		srv.mu.Lock()
		if len(srv.pipelines) != 1 || len(srv.pipelines[0]) != 2 || srv.pipelines[0][0] != "sender" || srv.ended[0] {
			t.Fatalf("round %d: pipelines %q, their contexts ended %v; want one of the sender's and the other call, not ended",
				round, srv.pipelines, srv.ended)
		}
		srv.mu.Unlock()
		// The turn came back: the next call goes out at once, alone.
		if r := <-run(context.Background(), "next"); r.Value != "next" {
			t.Fatalf("round %d: the next call got %+v", round, r)
		}
		if c.Queued() != 0 {
			t.Fatalf("round %d: %d calls left queued", round, c.Queued())
		}
	}
}
