package redleasetest

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// gate is a go-redis hook on the Kit's Clients' connections that can hold
// their requests back while the Kit changes Redis in more than one request
// (Steal: a Break, then an acquire), so that none of theirs lands in
// between: a waiter that the Break wakes must find the other owner's lease,
// as it would after a takeover in one step.
type gate struct {
	mu       sync.Mutex
	inflight int
	held     chan struct{} // non-nil while requests are held back; closed to let them go
}

var _ redis.Hook = (*gate)(nil)

func (g *gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.enter(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		defer g.leave()
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.enter(ctx); err != nil {
			for _, cmd := range cmds { // or their replies would read as zero values
				cmd.SetErr(err)
			}
			return err
		}
		defer g.leave()
		return next(ctx, cmds)
	}
}

// enter waits while requests are held back, or until ctx ends.
func (g *gate) enter(ctx context.Context) error {
	for {
		g.mu.Lock()
		held := g.held
		if held == nil {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		g.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
}

// hold holds back new requests and waits up to limit for those under way
// to end; it reports whether they did, and returns the function that lets
// requests go again, to be called in either case.
func (g *gate) hold(limit time.Duration) (open func(), ok bool) {
	held := make(chan struct{})
	g.mu.Lock()
	g.held = held
	g.mu.Unlock()
	open = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.held = nil
		close(held)
	}
	deadline := time.Now().Add(limit)
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		g.mu.Lock()
		n := g.inflight
		g.mu.Unlock()
		if n == 0 {
			return open, true
		}
		if time.Now().After(deadline) {
			return open, false
		}
		time.Sleep(pause)
	}
}
