package redlease

import (
	"context"
	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/wire"
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// counterKey is the key of the fence counter that resource draws from,
// under the default prefix.
func counterKey(resource string) string {
	return wire.SlotCounter(DefaultPrefix, wire.SlotOf(resource))
}

// testHub returns a hub on rdb, closed when the test ends.
func testHub(tb testing.TB, rdb redis.UniversalClient) *hub {
	d, err := goredis.New(rdb)
	if err != nil {
		tb.Fatal(err)
	}
	h := newHub(wire.NewConn(d, 0), clock.Real)
	tb.Cleanup(func() { h.close(context.Background()) })
	return h
}

// waitOptions returns opts as the options of a waiting acquire call.
func waitOptions(opts []LeaseOption) []WaitOption {
	out := make([]WaitOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}
