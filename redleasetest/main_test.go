package redleasetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/servertest"
)

// Leaked goroutines fail the run: the Kit must close everything it starts.
func TestMain(m *testing.M) { servertest.Main(m) }

// The Kit works in a test run under GODEBUG=fips140=only, where crypto/sha1
// panics: its embedded Redis names scripts by their SHA-1, and did so on
// goroutines that enforcement covered, also those a Restore starts. The
// test binary runs again, under that setting, with tests that run scripts
// and restart the embedded Redis.
func TestKitUnderFIPSOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.count=1", "-test.v",
		"-test.run=^(TestOutage|TestStealIsRejectedByAFencingGuard|TestExtendShortensTheLeaseAndTheWatchdogFollows)$")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under fips140=only: %v\n%s", err, out)
	}
	for _, name := range []string{"TestOutage", "TestStealIsRejectedByAFencingGuard", "TestExtendShortensTheLeaseAndTheWatchdogFollows"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass under fips140=only:\n%s", name, out)
		}
	}
}
