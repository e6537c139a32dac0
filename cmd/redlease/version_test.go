package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/redlease/redlease", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-12-01T10:04:00Z"},
			{Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}}}
	want := "redlease v1.4.0 (github.com/redlease/redlease)\nrevision 0123abcd 2025-12-01T10:04:00Z modified\ngo go1.26.8 linux/arm64\n"
	if got := versionText(bi, true); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	bi.Settings = nil
	if got := versionText(bi, true); !strings.Contains(got, "revision unknown") {
		t.Errorf("without VCS settings:\n%s", got)
	}
}

// A binary built from a git checkout names its revision. It is built from
// a copy of this module's files in a repository of their own: cmd/go stamps
// nothing in a git worktree (its .git is a file, not a directory), and a
// clone would lack what is not committed yet.
func TestVersionOfABuiltBinary(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout, or no git: %v", err)
	}
	from := strings.TrimSpace(string(top))
	src := t.TempDir()
	for _, name := range strings.Split(gitOutput(t, from, "ls-files", "-co", "--exclude-standard"), "\n") {
		data, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not committed yet
		} else if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitOutput(t, src, "init", "-q")
	gitOutput(t, src, "add", ".")
	gitOutput(t, src, "-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-m", "copy")
	head := gitOutput(t, src, "rev-parse", "HEAD")

	bin := filepath.Join(t.TempDir(), "redlease")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/redlease")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("redlease version: %v", err)
	}
	if !bytes.HasPrefix(out, []byte("redlease ")) || !strings.Contains(string(out), "revision "+head+" ") ||
		!strings.Contains(string(out), "(github.com/redlease/redlease)") || strings.Contains(string(out), "modified") {
		t.Errorf("redlease version:\n%s\nwant the revision %s, unmodified", out, head)
	}
}

func gitOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %q: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
