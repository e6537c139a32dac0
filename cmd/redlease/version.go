package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionHelp = `usage: redlease version

Prints the module version of redlease, the VCS revision it was built from
(with its time, and "modified" for a build from a checkout with changes),
and the Go toolchain, from the build information in the binary.

Examples:
  redlease version
`

func versionCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionHelp)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "version", &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())})
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(bi, ok))
	return exitOK
}

// versionText describes a build: module version, VCS revision, Go.
func versionText(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return fmt.Sprintf("redlease (no build information)\ngo %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "redlease %s (%s)\n", bi.Main.Version, bi.Main.Path)
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := vcs["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " %s", t)
		}
		if vcs["vcs.modified"] == "true" {
			b.WriteString(" modified")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown (not built from a VCS checkout)\n")
	}
	goos, goarch := vcs["GOOS"], vcs["GOARCH"]
	if goos == "" {
		goos, goarch = runtime.GOOS, runtime.GOARCH
	}
	fmt.Fprintf(&b, "go %s %s/%s\n", bi.GoVersion, goos, goarch)
	return b.String()
}
