package redlease

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An option that a call does not honour does not compile there: the Try…
// calls do not take WithMaxWait, the acquire calls do not take
// WithCombinedRequests. (Both were accepted, and silently ignored.) It
// builds a program with each misapplied option and expects the compiler's
// refusal.
func TestMisappliedOptionsDoNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ call, want string }{
		{`c.TryAcquire(ctx, "r", redlease.WithMaxWait(time.Second))`, "missing method leases"},
		{`c.TryAcquireSemaphore(ctx, "r", 2, redlease.WithMaxWait(time.Second))`, "missing method leases"},
		{`c.Acquire(ctx, "r", redlease.WithCombinedRequests(false))`, "missing method waits"},
		{`c.TryAcquire(ctx, "r", redlease.WithCombinedRequests(false))`, "missing method"},
		{`redlease.NewElection(c, "e", redlease.WithCombinedRequests(false))`, "missing method waits"},
		{`c.Acquire(ctx, "r", redlease.WithMaxWait(time.Second), redlease.WithTTL(time.Second))`, ""}, // compiles
	} {
		t.Run(tc.call, func(t *testing.T) {
			dir := t.TempDir()
			src := "package main\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/redlease/redlease\"\n)\n\n" +
				"func main() {\n\tctx := context.Background()\n\tc := redlease.New(nil)\n\t_, _, _ = ctx, time.Second, c\n\t" +
				tc.call + "\n}\n"
			mod := "module probe\n\ngo 1.26.0\n\nrequire github.com/redlease/redlease v0.0.0\n\nreplace github.com/redlease/redlease => " + root + "\n"
			sum, err := os.ReadFile("go.sum")
			if err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string]string{"main.go": src, "go.mod": mod, "go.sum": string(sum)} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("go", "vet", ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
			out, err := cmd.CombinedOutput()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("does not compile: %v\n%s", err, out)
			case tc.want != "" && err == nil:
				t.Fatalf("compiles")
			case tc.want != "" && !strings.Contains(string(out), tc.want):
				t.Fatalf("refused, but not as expected (%q):\n%s", tc.want, out)
			}
		})
	}
}
