package redlease

import (
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// counterKey is the key of the fence counter that resource draws from,
// under the default prefix.
func counterKey(resource string) string { return slotCounter(DefaultPrefix, slotOf(resource)) }
