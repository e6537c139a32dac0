package valkeylease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/valkeylease"
)

func Example() {
	addr, stop := exampleServer() // a valkey-server on loopback, for this example
	defer stop()
	ctx := context.Background()

	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locks := valkeylease.New(client, redlease.WithTTL(10*time.Second))
	defer locks.Close(ctx)

	lease, err := locks.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Resource(), "with fence", lease.Fence())
	_, err = locks.TryAcquire(ctx, "nightly-report")
	fmt.Println("second try busy:", errors.Is(err, redlease.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", context.Cause(lease.Context()))

	// The next holder writes through a fencing guard on the same client;
	// the first holder's write, with its older fence, is then refused.
	next, err := locks.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	guard := fencing.NewRedisGuardWithDriver(valkeylease.Driver(client))
	if err := guard.Set(ctx, "report:status", "done", 0, next.Fence(), next.Owner()); err != nil {
		log.Fatal(err)
	}
	err = guard.Set(ctx, "report:status", "running", 0, lease.Fence(), lease.Owner())
	fmt.Println("next fence larger:", next.Fence() > lease.Fence(), "older fence refused:", errors.Is(err, fencing.ErrStaleFence))
	// Output:
	// holding nightly-report with fence 1
	// second try busy: true
	// released: redlease: lease released
	// next fence larger: true older fence refused: true
}

// exampleServer starts a valkey-server for an example, and returns its
// address and how to stop it.
func exampleServer() (addr string, stop func()) {
	t := &exampleT{}
	defer func() {
		if v := recover(); v != nil {
			t.end()
			log.Fatal(v)
		}
	}()
	return servertest.Start(t, servertest.Valkey).Addr, t.end
}

// exampleT is the testing.TB that servertest needs, for an example, which
// has none.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any) {
	panic(fmt.Sprint(args...))
}
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (t *exampleT) Skip(args ...any) { t.Fatal(args...) }
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "valkeylease-example")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}
