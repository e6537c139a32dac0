package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/rueidislease"
	"github.com/redlease/redlease/valkeylease"
)

// The other clients: redlease through its rueidis and valkey-go drivers,
// and the locks that ship with those clients. Each shared value dials its
// own client of the server (the go-redis client the harness passes only
// names the address); a closed shared value's client is closed with it.

// tripCounter is a locker whose requests are counted by its own client
// (not by the harness's go-redis hook): each Do is one round trip, each
// DoMulti one pipeline.
type tripCounter interface{ trips() *atomic.Int64 }

// countedRueidis counts the requests sent through a rueidis client: in n
// each Do and DoMulti once (a round trip), in cmds (if not nil) each
// command.
type countedRueidis struct {
	rueidis.Client
	n, cmds *atomic.Int64
}

func (c countedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	if c.cmds != nil {
		c.cmds.Add(1)
	}
	return c.Client.Do(ctx, cmd)
}

func (c countedRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	if c.cmds != nil {
		c.cmds.Add(int64(len(cmds)))
	}
	return c.Client.DoMulti(ctx, cmds...)
}

// countedValkey counts the requests sent through a valkey-go client.
type countedValkey struct {
	valkey.Client
	n *atomic.Int64
}

func (c countedValkey) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countedValkey) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// driverShared is a redlease Client on another client, and its counter.
type driverShared struct {
	c     *redlease.Client
	n     *atomic.Int64
	close func() // the client under c
}

// driverLocker is redleaseLocker on a driverShared.
type driverLocker struct {
	redleaseLocker
	n           *atomic.Int64
	closeClient func()
}

func (l *driverLocker) trips() *atomic.Int64 { return l.n }

func (l *driverLocker) close(ctx context.Context) {
	l.redleaseLocker.close(ctx)
	l.closeClient()
}

func redleaseOn(name string, dial func(addr string, n *atomic.Int64) (*redlease.Client, func(), error)) impl {
	return impl{
		name: name,
		shared: func(rdb *redis.Client) any {
			n := new(atomic.Int64)
			c, closeClient, err := dial(rdb.Options().Addr, n)
			if err != nil {
				return err
			}
			return &driverShared{c: c, n: n, close: closeClient}
		},
		locker: func(_ *redis.Client, s any) locker {
			d, ok := s.(*driverShared)
			if !ok {
				return failed{s.(error)}
			}
			return &driverLocker{redleaseLocker: redleaseLocker{c: d.c}, n: d.n, closeClient: d.close}
		},
		waits: true,
	}
}

// failed is the locker of a shared value that could not be made.
type failed struct{ err error }

func (f failed) Lock(context.Context, string) error { return f.err }
func (f failed) Unlock(context.Context) error       { return f.err }

func redleaseRueidisImpl(name string) impl {
	return redleaseOn(name, func(addr string, n *atomic.Int64) (*redlease.Client, func(), error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		return rueidislease.New(countedRueidis{c, n, nil}, redlease.WithTTL(ttl)), c.Close, nil
	})
}

func redleaseValkeyImpl(name string) impl {
	return redleaseOn(name, func(addr string, n *atomic.Int64) (*redlease.Client, func(), error) {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		return valkeylease.New(countedValkey{c, n}, redlease.WithTTL(ttl)), c.Close, nil
	})
}

// clientLocker is rueidislock's and valkeylock's API: WithContext waits
// for the lock and returns a context that ends when the lock is lost, and
// a cancel func that releases it. The release's DEL is sent by the lock's
// own goroutine after cancel returns, so a pair's time counts the acquire
// and only the start of the release.
type clientLocker struct {
	with   func(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
	cancel context.CancelFunc
	end    func() // closes the locker
}

func (l *clientLocker) close(context.Context) { l.end() }

func (l *clientLocker) Lock(ctx context.Context, key string) (err error) {
	_, l.cancel, err = l.with(ctx, key)
	return err
}

func (l *clientLocker) Unlock(context.Context) error {
	if l.cancel == nil {
		return errors.New("unlock without a lock")
	}
	l.cancel()
	l.cancel = nil
	return nil
}

// clientLock is what rueidislock's and valkeylock's Lockers share.
type clientLock interface {
	WithContext(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
	Close()
}

// clientLockImpl is a row of a clientLock that newLocker makes for the
// server at addr.
func clientLockImpl(name string, newLocker func(addr string) (clientLock, error)) impl {
	return impl{
		name: name,
		shared: func(rdb *redis.Client) any {
			lk, err := newLocker(rdb.Options().Addr)
			if err != nil {
				return err
			}
			return lk
		},
		locker: func(_ *redis.Client, s any) locker {
			lk, ok := s.(clientLock)
			if !ok {
				return failed{s.(error)}
			}
			return &clientLocker{with: lk.WithContext, end: lk.Close}
		},
		waits: true,
	}
}

// One key per lock (KeyMajority 1), as every other row here; their
// default, 2, takes a majority of three keys.
func rueidislockImpl(name string) impl {
	return clientLockImpl(name, func(addr string) (clientLock, error) {
		return rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
			KeyValidity:  ttl, KeyMajority: 1, NoLoopTracking: true,
		})
	})
}

func valkeylockImpl(name string) impl {
	return clientLockImpl(name, func(addr string) (clientLock, error) {
		return valkeylock.NewLocker(valkeylock.LockerOption{
			ClientOption: valkey.ClientOption{InitAddress: []string{addr}},
			KeyValidity:  ttl, KeyMajority: 1, NoLoopTracking: true,
		})
	})
}

// fencedRueidisLocker is the fenced floor (fencedLocker's two scripts)
// sent through rueidis: what any fenced lock costs on that client.
type fencedRueidisLocker struct {
	c     rueidis.Client
	base  string
	n     uint64
	key   string
	owner string
}

var (
	fencedLua    = rueidis.NewLuaScript(fencedSrc)
	fencedDelLua = rueidis.NewLuaScript(fencedDelSrc)
)

func (l *fencedRueidisLocker) Lock(ctx context.Context, key string) error {
	l.n++
	l.key, l.owner = key, l.base+strconv.FormatUint(l.n, 36)
	f, err := fencedLua.Exec(ctx, l.c, []string{key, key + ":fence"}, []string{l.owner, strconv.FormatInt(ttlMS, 10)}).AsInt64()
	if err == nil && f <= 0 {
		err = errBusy
	}
	return err
}

func (l *fencedRueidisLocker) close(context.Context) { l.c.Close() }

func (l *fencedRueidisLocker) Unlock(ctx context.Context) error {
	n, err := fencedDelLua.Exec(ctx, l.c, []string{l.key}, []string{l.owner}).AsInt64()
	if err == nil && n != 1 {
		err = errors.New("raw: delete did not delete the lock")
	}
	return err
}

// fencedRueidisImpl is the fenced floor on rueidis. With subscribed, the
// client first subscribes to a channel, as redlease's hub does (its break
// channel): rueidis then sends every request through its pipelining
// goroutines, where a client that never subscribed, and never had two
// requests at once on its connection, writes and reads on the caller's
// goroutine.
func fencedRueidisImpl(name string, subscribed bool) impl {
	return impl{
		name: name,
		shared: func(rdb *redis.Client) any {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rdb.Options().Addr}, DisableCache: true})
			if err != nil {
				return err
			}
			if subscribed {
				if err := subscribeIdle(c); err != nil {
					c.Close()
					return err
				}
			}
			return c
		},
		locker: func(_ *redis.Client, s any) locker {
			c, ok := s.(rueidis.Client)
			if !ok {
				return failed{s.(error)}
			}
			return &fencedRueidisLocker{c: c, base: uniqueBase()}
		},
	}
}

// subscribeIdle subscribes c to a channel nobody publishes on, for as long
// as c lives, and returns once Redis has confirmed it.
func subscribeIdle(c rueidis.Client) error {
	ok := make(chan struct{})
	var once sync.Once
	ctx := rueidis.WithOnSubscriptionHook(context.Background(), func(rueidis.PubSubSubscription) {
		once.Do(func() { close(ok) })
	})
	failed := make(chan error, 1)
	go func() {
		failed <- c.Receive(ctx, c.B().Subscribe().Channel("bench:idle").Build(), func(rueidis.PubSubMessage) {})
	}()
	select {
	case <-ok:
		return nil
	case err := <-failed:
		return fmt.Errorf("subscribe: %w", err)
	case <-time.After(10 * time.Second):
		return errors.New("subscribe: not confirmed in 10 s")
	}
}
