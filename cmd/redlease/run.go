package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlease/redlease"
)

const runHelp = `usage: redlease run [flags] RESOURCE -- COMMAND [ARG...]

Runs COMMAND while holding the lease of RESOURCE: a flock(1) for a fleet.
It takes the lease (waiting for it unless -nowait), starts COMMAND with
these variables added to its environment:

  REDLEASE_RESOURCE  the resource name
  REDLEASE_FENCE     the lease's fencing token: pass it with every write, and
                     let the target reject a fence older than the newest it saw
  REDLEASE_OWNER     the lease's owner token

renews the lease while COMMAND runs, and releases it when COMMAND exits.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redlease are passed on to
COMMAND. COMMAND runs in a process group of its own, so signals reach
everything it starts; it cannot read from a terminal.

Processes that COMMAND leaves in its group (sh -c 'job &') get SIGTERM when
it exits, and SIGKILL -grace later; the lease is released once they are gone,
and the exit status stays COMMAND's. A process that left the group (setsid)
cannot be followed: it runs on without the lease.

Ctrl-Z (SIGTSTP) stops COMMAND's group, then redlease. On SIGCONT (fg),
COMMAND is resumed if the lease is still alive; stopped past its lifetime,
the lease is gone, and COMMAND gets SIGTERM instead. SIGSTOP sent to redlease
cannot be caught: its guardian (below) sends COMMAND's group SIGTERM a
second after the lease's local deadline, and SIGKILL -grace later.

COMMAND's parent is a guardian process (redlease __guardian, in a process
group of its own) that outlives redlease. If redlease is killed (kill -9,
the OOM killer), nobody renews the lease: the guardian sends COMMAND's group
SIGTERM at once, and SIGKILL -grace later or at the lease's local deadline,
whichever comes first, so that the group is gone before Redis can let the
next holder in. Like flock(1)'s lock, this reaches only what stays in the
group: a process that left it (setsid, a daemon that detaches) is not
followed. If the guardian is killed too (pkill -9 redlease), Linux sends
COMMAND itself SIGTERM, but what COMMAND started runs on; if only the
guardian is killed, redlease stops the group and exits 1. Elsewhere than on
Linux, COMMAND is not told of its guardian's death; without Unix process
groups (Windows) there is no guardian, and COMMAND runs on unrenewed.

If the lease ends while COMMAND runs (Redis says it is not ours any more, no
renewal was confirmed in time, or -max-hold ran out), COMMAND's process group
gets SIGTERM, and SIGKILL if it still runs -grace later. The lease context
ends a safety margin (-margin) before Redis can let the next holder in; a
-grace longer than that lets COMMAND overlap the next holder, and then only
REDLEASE_FENCE protects the target.

Exit status:
  the command's own status (128+N if it was killed by signal N)
  1    the guardian was killed while the command ran; the command was stopped
  69   Redis unreachable or refusing, also when -wait ran out during an
       outage; the command did not run
  75   not acquired: the lease is held (-nowait), or was still held when
       -wait ran out
  76   the lease ended while the command ran (lost, not renewed in time,
       broken by an operator, or -max-hold reached); the command was stopped
       or had already finished without the lease; its own status is on stderr
  126  the command could not be executed
  127  the command was not found
  128+N  redlease got signal N while waiting for the lease
  2    usage error

Examples:
  redlease run nightly-report -- ./report.sh --date today
  redlease run -nowait -ttl 1m backup -- sh -c 'pg_dump app | gzip > /backup/app.gz'
  redlease run -wait 5m -max-hold 1h -grace 30s migrate -- ./migrate up
`

func runCommand(args []string, stdout, stderr io.Writer) int {
	fset := newFlagSet("run", runHelp)
	cf := addConnFlags(fset)
	ttl := fset.Duration("ttl", redlease.DefaultTTL, "lease `TTL`; the lease is renewed every TTL/3")
	wait := fset.Duration("wait", 0, "wait at most this long for the lease (0: until it is acquired)")
	nowait := fset.Bool("nowait", false, "do not wait: exit 75 at once if the lease is held")
	maxHold := fset.Duration("max-hold", 0, "stop the command and let the lease go after this long (0: no limit)")
	grace := fset.Duration("grace", 10*time.Second, "how long after SIGTERM a command that lost its lease gets SIGKILL")
	margin := fset.Duration("margin", 0, "safety margin: how long before the TTL runs out, unrenewed, the command is stopped (0: TTL/10)")
	fair := fset.Bool("fair", false, "hand the lease to waiters in arrival order")
	if code, done := parse(fset, args, stdout, stderr); done {
		return code
	}
	rest := fset.Args()
	switch {
	case len(rest) == 0:
		return fail(stderr, "run", &usageError{"no RESOURCE given"})
	case len(rest) > 1 && rest[1] != "--" && strings.HasPrefix(rest[1], "-"):
		return fail(stderr, "run", &usageError{fmt.Sprintf("flag %s after RESOURCE: flags go before it", rest[1])})
	case *nowait && *wait > 0:
		return fail(stderr, "run", &usageError{"-wait and -nowait exclude each other"})
	case *grace < 0:
		return fail(stderr, "run", &usageError{fmt.Sprintf("-grace %v: must not be negative", *grace)})
	}
	resource, argv := rest[0], rest[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return fail(stderr, "run", &usageError{"no COMMAND given"})
	}
	// 0 means the default for -margin and -wait; other values, negative
	// ones too, go to the library, which checks them.
	flags := []flagOption{{"-ttl", *ttl, redlease.WithTTL(*ttl)}}
	if *margin != 0 {
		flags = append(flags, flagOption{"-margin", *margin, redlease.WithSafetyMargin(*margin)})
	}
	flags = append(flags, flagOption{"-max-hold", *maxHold, redlease.WithMaxHold(*maxHold)})
	if *wait != 0 {
		flags = append(flags, flagOption{"-wait", *wait, redlease.WithMaxWait(*wait)})
	}
	flags = append(flags, flagOption{"-fair", *fair, redlease.WithFair(*fair)})
	opts := make([]redlease.Option, len(flags))
	for i, f := range flags {
		opts[i] = f.opt
	}

	ctx := context.Background()
	s, err := cf.open(ctx, stderr, []string{resource}, flags)
	if err != nil {
		return fail(stderr, "run", err)
	}
	defer s.close()
	r := &runner{s: s, resource: resource, argv: argv, grace: *grace, stdout: stdout, stderr: stderr}
	return r.run(ctx, !*nowait, opts)
}

// runner is one redlease run.
type runner struct {
	s        *session
	resource string
	argv     []string
	grace    time.Duration
	stdout   io.Writer
	stderr   io.Writer
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintln(r.stderr, "redlease run:", oneRedlease(fmt.Sprintf(format, args...)))
}

// signalError is the cause of an acquire stopped by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "got signal " + e.sig.String() }

func (r *runner) run(ctx context.Context, wait bool, opts []redlease.Option) int {
	// Signals are caught from here on: while waiting they stop the wait,
	// while the command runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	// A command that cannot be found fails before the lease is taken.
	// exec.Command looks up only a name without a slash; LookPath also
	// checks a path, that it exists and may be executed.
	if _, err := exec.LookPath(r.argv[0]); err != nil {
		r.say("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec // found, but a directory, not executable, or only relative to "."
	}
	renewals, observe := renewalNotices()
	lease, code := r.acquire(ctx, sigs, wait, append(opts, observe))
	if lease == nil {
		return code
	}
	// Caught from before the start, so that an early Ctrl-Z waits for
	// supervise rather than stopping redlease alone. Notify with no signals
	// would catch them all.
	jobSigs := make(chan os.Signal, 4)
	if len(jobControl) > 0 {
		signal.Notify(jobSigs, jobControl...)
		defer signal.Stop(jobSigs)
	}
	j, err := startJob(jobSpec{
		argv: r.argv,
		env: append(os.Environ(),
			"REDLEASE_RESOURCE="+r.resource,
			"REDLEASE_FENCE="+strconv.FormatInt(lease.Fence(), 10),
			"REDLEASE_OWNER="+lease.Owner()),
		grace: r.grace,
		first: guardState{mode: modeRun, leaseLeft: max(time.Until(lease.Deadline()), 0)},
		stdin: os.Stdin, stdout: r.stdout, stderr: r.stderr,
	})
	if err != nil {
		_ = r.release(lease)
		var sf *startFailure
		errors.As(err, &sf)
		r.say("%s", sf.msg)
		return sf.status
	}
	r.s.debug("started", "pid", j.pid())
	lost := r.supervise(j, lease, sigs, jobSigs, renewals)
	j.finish()
	return r.conclude(lease, lost, j.status())
}

// renewalNotices returns an option that observes a lease's confirmed
// renewals, and the channel it tells of them on (one notice may stand for
// several), for the supervisor to pass each new deadline on to the guardian.
// An observer must not block, nor call the lease.
func renewalNotices() (<-chan struct{}, redlease.Option) {
	renewals := make(chan struct{}, 1)
	return renewals, redlease.WithObserver(redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		if e.Kind == redlease.EventRenew && e.Outcome == redlease.OutcomeOK {
			select {
			case renewals <- struct{}{}:
			default:
			}
		}
	}))
}

// jobSpec is what startJob starts: COMMAND, with what its guardian needs.
type jobSpec struct {
	argv, env []string
	grace     time.Duration // after SIGTERM, should redlease die
	first     guardState    // the lease as it is when COMMAND starts
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
}

// startFailure is a COMMAND that could not be started, and redlease's exit
// status for it.
type startFailure struct {
	status int
	msg    string
}

func (e *startFailure) Error() string { return e.msg }

// conclude releases the lease after the command and what it left behind
// are gone, and returns redlease's exit status: the command's, or exitLost
// if the lease ended before the command did.
func (r *runner) conclude(lease *redlease.Lease, lost error, status int) int {
	if lost == nil && lease.Context().Err() != nil {
		lost = context.Cause(lease.Context()) // ended as the command exited
	}
	relErr := r.release(lease)
	switch {
	case lost != nil && status < 0:
		r.say("the lease of %q ended; the command's exit status is unknown (its guardian was killed)", r.resource)
		return exitLost
	case lost != nil:
		r.say("the command exited with status %d after the lease of %q ended", status, r.resource)
		return exitLost
	case status < 0:
		return exitFailed // the guardian was killed, and the command stopped
	case errors.Is(relErr, redlease.ErrLeaseLost):
		r.say("the lease of %q was lost before the command ended (it expired or was broken): %v; "+
			"the command exited with status %d", r.resource, relErr, status)
		return exitLost
	case relErr != nil:
		r.say("release failed (the lease expires within its TTL): %v", relErr)
	}
	r.s.debug("released", "resource", r.resource, "status", status)
	return status
}

// acquire takes the lease, or returns nil and the exit code.
func (r *runner) acquire(ctx context.Context, sigs <-chan os.Signal, wait bool, opts []redlease.Option) (*redlease.Lease, int) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // ends when a signal came or the acquire is over
		defer close(watched)
		select {
		case sig := <-sigs:
			cancel(signalError{sig})
		case <-stop:
		}
	}()
	var lease *redlease.Lease
	var err error
	if wait {
		lease, err = r.s.locks.Acquire(actx, r.resource, opts...)
	} else {
		lease, err = r.s.locks.TryAcquire(actx, r.resource, opts...)
	}
	close(stop)
	<-watched

	var sig signalError
	if errors.As(context.Cause(actx), &sig) {
		if lease != nil {
			_ = r.release(lease)
		}
		r.say("%v while waiting for %q", sig, r.resource)
		return nil, signalStatus(sig.sig)
	}
	var busy *redlease.BusyError
	switch {
	case err == nil:
		return lease, exitOK
	case errors.As(err, &busy):
		r.say("not acquired: %v", err)
		return nil, exitBusy
	case errors.Is(err, context.DeadlineExceeded) && contended(err):
		r.say("not acquired within -wait: %v", err)
		return nil, exitBusy
	}
	return nil, fail(r.stderr, "run", err)
}

// contended reports whether an acquire error means only that the lease
// stayed held until -wait ran out. Acquire rides out an outage while it
// waits; when the wait runs out during one, the error also carries the last
// attempt's error ("(last attempt: ...)") or ErrOutcomeUnknown, and that is
// Redis trouble (69), not contention (75). The last attempt's error can be
// of any type (Sentinel and Cluster clients return plain errors), so rather
// than list them, the error tree is walked: it must hold nothing but
// ErrNotAcquired and the wait's deadline.
func contended(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		return !slices.ContainsFunc(e.Unwrap(), func(e error) bool { return !contended(e) })
	case interface{ Unwrap() error }:
		return contended(e.Unwrap())
	}
	// Leaves are compared, not matched with errors.Is: a network timeout
	// matches context.DeadlineExceeded too, and it is an outage.
	return err == redlease.ErrNotAcquired || err == context.DeadlineExceeded
}

// leaseGone returns why the lease has ended, or nil while it holds. After
// redlease was stopped past the lease's local deadline, the lease is gone
// although its context may not have ended yet: the timer that ends it has
// not had its turn.
func leaseGone(lease *redlease.Lease) error {
	if lease.Context().Err() != nil {
		return context.Cause(lease.Context())
	}
	if !time.Now().Before(lease.Deadline()) {
		return fmt.Errorf("%w: %q: its local deadline passed while redlease was stopped", redlease.ErrLeaseLost, lease.Resource())
	}
	return nil
}

// release releases the lease; its error is reported by the caller.
func (r *runner) release(lease *redlease.Lease) error {
	return lease.Release(context.Background())
}
