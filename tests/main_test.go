package tests

import (
	"flag"
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

// TestMain runs the suite four subtests at a time unless -parallel says
// otherwise: its scenarios spend most of their time waiting (for TTLs,
// pauses, servers), and run on every library and server, so one at a time
// per core (go test's default) makes it take twice as long on 2 cores. Eight
// at a time there made a timing check fail.
func TestMain(m *testing.M) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	servertest.Main(m)
}
