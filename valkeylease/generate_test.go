package valkeylease

import (
	"os"
	"os/exec"
	"testing"
)

//go:generate go run gen.go

// This package is rueidislease for valkey-go: gen.go writes its driver and
// its tests from rueidislease's, with the names changed. A change made to
// one and not generated into the other fails here (in a checkout of the
// repository, where ../rueidislease is).
func TestGenerated(t *testing.T) {
	if _, err := os.Stat("../rueidislease"); err != nil {
		t.Skip("no ../rueidislease: not a checkout of the repository")
	}
	if out, err := exec.Command("go", "run", "gen.go", "-check").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
