package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

// A program that imports redlease, fencing and the adapters starts, and
// takes, renews and releases a lease and fences a write through each
// client, under GODEBUG=fips140=only, where crypto/sha1 panics. (Before
// the protocol layer, one that imported redlease panicked at start: the
// scripts' hashes were computed at package init.)
func TestFIPSOnly(t *testing.T) {
	srv := servertest.Redis(t)
	bin := filepath.Join(t.TempDir(), "fipsprobe")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/fipsprobe").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, srv.Addr)
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under fips140=only: %v\n%s", err, out)
	}
	for _, lib := range []string{"go-redis", "rueidis", "valkey-go"} {
		if !strings.Contains(string(out), lib+": fence ") {
			t.Errorf("no probe of %s:\n%s", lib, out)
		}
	}
	t.Logf("%s", out)
}
