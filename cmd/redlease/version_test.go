package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// version -json has what the text has, as one object; what the build
// information lacks is left out.
func TestVersionJSON(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/redlease/redlease", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-12-01T10:04:00Z"},
			{Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}}}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"from a checkout", bi, true, `{"module":"github.com/redlease/redlease","version":"v1.4.0","go":"go1.26.8","os":"linux",` +
			`"arch":"arm64","revision":"0123abcd","time":"2025-12-01T10:04:00Z","modified":true}`},
		{"unmodified", &debug.BuildInfo{GoVersion: "go1.26.8", Main: bi.Main, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"}}},
			true, `{"module":"github.com/redlease/redlease","version":"v1.4.0","go":"go1.26.8","os":"` + runtime.GOOS +
				`","arch":"` + runtime.GOARCH + `","revision":"0123abcd","modified":false}`},
		{"no VCS", &debug.BuildInfo{GoVersion: "go1.26.8", Main: bi.Main}, true,
			`{"module":"github.com/redlease/redlease","version":"v1.4.0","go":"go1.26.8","os":"` + runtime.GOOS + `","arch":"` + runtime.GOARCH + `"}`},
		{"no build information", nil, false, `{"go":"` + runtime.Version() + `","os":"` + runtime.GOOS + `","arch":"` + runtime.GOARCH + `"}`},
	} {
		got, err := json.Marshal(versionOf(tc.bi, tc.ok))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}

	// The command: one object, the build information of this binary.
	var out, errOut bytes.Buffer
	if code := run([]string{"version", "-json"}, &out, &errOut); code != exitOK || errOut.Len() != 0 {
		t.Fatalf("version -json: exit %d, stderr %q", code, errOut.String())
	}
	var v versionJSON
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || dec.More() {
		t.Fatalf("version -json: %v (more: %v)", err, dec.More())
	}
	if v.Go != runtime.Version() || v.OS != runtime.GOOS || v.Arch != runtime.GOARCH || v.Module == "" {
		t.Errorf("version -json: %+v", v)
	}
	if code := run([]string{"version", "-json", "x"}, &out, &errOut); code != exitUsage {
		t.Errorf("version -json x: exit %d, want %d", code, exitUsage)
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
	out, err = exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("redlease version -json: %v", err)
	}
	var v versionJSON
	if err := json.Unmarshal(out, &v); err != nil || v.Revision != head || v.Time == "" || v.Modified == nil || *v.Modified ||
		v.Module != "github.com/redlease/redlease" || v.Go != runtime.Version() {
		t.Errorf("redlease version -json: %v\n%s\nwant the revision %s, unmodified", err, out, head)
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
