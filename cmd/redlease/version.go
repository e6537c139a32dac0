package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionHelp = `usage: redlease version [-json]

Prints the module version of redlease, the VCS revision it was built from
(with its time, and "modified" for a build from a checkout with changes),
and the Go toolchain, from the build information in the binary.

-json prints them as one JSON object: "module" (the module path) and
"version", present when the binary has build information; "go", "os" and
"arch"; and "revision", "time" and "modified" (true or false), present
when the binary was built from a VCS checkout.

Examples:
  redlease version
  redlease version -json
`

func versionCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionHelp)
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "version", &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())})
	}
	bi, ok := debug.ReadBuildInfo()
	if *asJSON {
		if err := writeJSON(stdout, versionOf(bi, ok)); err != nil {
			fmt.Fprintln(stderr, "redlease version:", err)
			return exitFailed
		}
		return exitOK
	}
	fmt.Fprint(stdout, versionText(bi, ok))
	return exitOK
}

// versionJSON is redlease version -json's object.
type versionJSON struct {
	Module   string `json:"module,omitempty"`
	Version  string `json:"version,omitempty"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified *bool  `json:"modified,omitempty"` // with a revision
}

// versionOf describes a build as versionText does.
func versionOf(bi *debug.BuildInfo, ok bool) versionJSON {
	v := versionJSON{Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if !ok {
		return v
	}
	v.Module, v.Version, v.Go = bi.Main.Path, bi.Main.Version, bi.GoVersion
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if vcs["GOOS"] != "" {
		v.OS, v.Arch = vcs["GOOS"], vcs["GOARCH"]
	}
	if v.Revision = vcs["vcs.revision"]; v.Revision != "" {
		v.Time = vcs["vcs.time"]
		modified := vcs["vcs.modified"] == "true"
		v.Modified = &modified
	}
	return v
}

// versionText describes a build in text: module version, VCS revision, Go.
func versionText(bi *debug.BuildInfo, ok bool) string {
	v := versionOf(bi, ok)
	if !ok {
		return fmt.Sprintf("redlease (no build information)\ngo %s %s/%s\n", v.Go, v.OS, v.Arch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "redlease %s (%s)\n", v.Version, v.Module)
	if v.Revision != "" {
		fmt.Fprintf(&b, "revision %s", v.Revision)
		if v.Time != "" {
			fmt.Fprintf(&b, " %s", v.Time)
		}
		if *v.Modified {
			b.WriteString(" modified")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown (not built from a VCS checkout)\n")
	}
	fmt.Fprintf(&b, "go %s %s/%s\n", v.Go, v.OS, v.Arch)
	return b.String()
}
