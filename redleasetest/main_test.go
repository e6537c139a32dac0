package redleasetest_test

import (
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

// Leaked goroutines fail the run: the Kit must close everything it starts.
func TestMain(m *testing.M) { servertest.Main(m) }
