// Command redlease works with redlease leases from the shell. For now it has
// one subcommand, demo, which tells the story redlease exists for: a holder
// that pauses past its TTL and whose late write the resource rejects.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: redlease <command> [flags]

Commands:
  demo    show a stale lease holder being stopped by its fencing token
          (embedded Redis by default; -redis URL for a real server)

Run 'redlease <command> -h' for the flags of a command.

Examples:
  redlease demo
  redlease demo -redis redis://127.0.0.1:6379/0 -ttl 2s
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		err := demo(args[1:], stdout, stderr)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case err != nil:
			fmt.Fprintln(stderr, "redlease demo:", err)
			return 1
		}
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlease: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
