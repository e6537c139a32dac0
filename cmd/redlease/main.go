// Command redlease works with redlease leases from the shell: it runs a
// command under a lease (a flock(1) for a fleet of machines), shows who holds
// which lease with which fence, removes a stuck lease by force, and tells the
// story redlease exists for (demo).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

const usage = `usage: redlease <command> [flags] [arguments]

Commands:
  run     run a command while holding a lease, like flock(1) across machines;
          or a permit of a semaphore (-permits N), a read or a write lease
  status  show the holders (fence, TTL, owner, description) of resources,
          their fence counter and waiters
  list    list the resources whose names match a pattern (SCAN, never KEYS);
          -fences: the fence counters instead
  break   remove stuck leases by force; the fence counter stays
  migrate-fences
          fold the per-resource fence counters of earlier versions into the
          counters of their hash slots
  demo    show a stale lease holder being stopped by its fencing token
          (embedded Redis by default; -redis URL for a real server)
  version print the module version and VCS revision redlease was built from
          (-json: as a JSON object)

Run 'redlease <command> -h' for the flags of a command.

Connecting (run, status, list, break, migrate-fences; after the command, or
before it, as in 'redlease -redis URL status R'):
  -redis URL  or $REDIS_URL; default ` + defaultURL + `
      redis://[user:password@]host:port[/db][?option=value]   one server
      rediss://...                                             one server, TLS
      redis+cluster://host:port,host:port[?option=value]       Redis Cluster
      redis+sentinel://host:port,host:port[/db]?master_name=NAME   Sentinel
      (rediss+cluster://, rediss+sentinel:// for TLS; options are go-redis's,
      e.g. dial_timeout=3s)
  -prefix P   key prefix of the leases (default "redlease:")
  -v          debug logs on stderr

Exit status: 0 success; 1 break removed nothing (run: its guardian process
was killed); 2 usage error; 69 Redis unreachable or refusing; for run also
75 busy (not acquired), 76 lease lost while the command ran, and otherwise
the command's own status ('redlease run -h' has them all).

Examples:
  redlease demo
  redlease demo -redis redis://127.0.0.1:6379/0 -ttl 2s
  redlease run -wait 10m nightly-report -- ./report.sh
  redlease run -permits 4 encoders -- ./encode.sh "$file"
  redlease status nightly-report
  redlease list 'tenant:*'
  redlease list -fences
  redlease break -fence 34 nightly-report
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	redis.SetLogger(&quietRedisLogger{})
	args, err := globalFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "redlease: %v (see 'redlease -h')\n", err)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:], stdout, stderr)
	case "status":
		return statusCommand(args[1:], stdout, stderr)
	case "list":
		return listCommand(args[1:], stdout, stderr)
	case "break":
		return breakCommand(args[1:], stdout, stderr)
	case "migrate-fences":
		return migrateFencesCommand(args[1:], stdout, stderr)
	case "demo":
		return demoCommand(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return versionCommand(args[1:], stdout, stderr)
	case guardianCommand:
		return guardianMain(args[1:], stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "redlease: unknown command %q (see 'redlease -h')\n", args[0])
		return exitUsage
	}
}

// commandFlags lists, for each command, the connection flags it takes.
var commandFlags = map[string][]string{
	"run": {"redis", "prefix", "v"}, "status": {"redis", "prefix", "v"}, "list": {"redis", "prefix", "v"},
	"break": {"redis", "prefix", "v"}, "migrate-fences": {"redis", "prefix", "v"}, "demo": {"redis"}, "version": nil,
}

// globalFlags moves the connection flags given before the command
// ('redlease -redis URL status R') after it, where the command reads them.
// Any other flag there is a mistake, and its error shows the order.
func globalFlags(args []string) ([]string, error) {
	if !strings.HasPrefix(args[0], "-") || slices.Contains([]string{"-h", "-help", "--help", "-version", "--version"}, args[0]) {
		return args, nil
	}
	fs := newFlagSet("redlease", usage)
	addConnFlags(fs)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return []string{"-h"}, nil
	} else if err != nil {
		order := "redlease <command> [flags] [arguments]"
		if i := slices.IndexFunc(args, func(a string) bool { _, ok := commandFlags[a]; return ok }); i >= 0 {
			order = "redlease " + args[i] + " [flags] ..."
		}
		return nil, fmt.Errorf("%v; a command's flags go after it: %s", err, order)
	}
	if fs.NArg() == 0 {
		return nil, errors.New("no command after the flags: redlease <command> [flags] [arguments]")
	}
	cmd := fs.Arg(0)
	takes, known := commandFlags[cmd]
	if !known {
		return nil, fmt.Errorf("unknown command %q", cmd)
	}
	out := []string{cmd}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && !slices.Contains(takes, f.Name) {
			err = fmt.Errorf("-%s does not apply to %s", f.Name, cmd)
		}
		out = append(out, "-"+f.Name+"="+f.Value.String())
	})
	return append(out, fs.Args()[1:]...), err
}
