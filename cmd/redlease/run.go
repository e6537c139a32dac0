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
  REDLEASE_PERMIT    with -permits: the permit it holds, 0 to N-1
  REDLEASE_TOKEN     the lease's token, for a Go program to take the lease
                     up with redlease.ParseToken and Client.Resume (same
                     -prefix): its lease context then ends when the lease
                     does. redlease still renews and releases the lease; a
                     Release by COMMAND ends it for redlease too (exit 76).
                     Like REDLEASE_OWNER, it lets whoever reads it act as
                     the holder: keep it from logs

renews the lease while COMMAND runs, and releases it when COMMAND exits.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redlease are passed on to
COMMAND. COMMAND runs in a process group of its own, so signals reach
everything it starts; it cannot read from a terminal, so when redlease's
stdin is one, COMMAND's is /dev/null (a pipe or a file is passed on).

A shared lease instead, one of these at most:
  -permits N  one of the N permits of RESOURCE's semaphore: up to N commands
              hold one at once. Every run on RESOURCE must give the same N
              while any permit is held; another N is refused (exit 2).
  -read       a read lease: shared with other readers, never with a writer.
  -write      the write lease: no reader and no other writer. Writers come
              first: while a writer waits, new readers wait behind it.
Each permit, read and write lease has a fence of its own; a shared lease is
renewed, supervised and released as the lease is, and all that follows
holds for it alike. Read and write leases of a resource are apart from its
lease and from its semaphore: use one kind per resource.

The lease records its holder, "<host> pid <pid of redlease>: COMMAND
[ARG...]" (quoted as a shell would read it, at most 1024 bytes), at no extra
cost: 'redlease status' and 'redlease list' show it, and a run that finds
the lease held (-nowait, or -wait running out) names the holder and says
when its lease lapses unless the holder renews it.

No overlap with the next holder, whatever the flags: COMMAND's process
group is killed (SIGKILL) by the lease's local deadline at the latest. That
deadline is a safety margin (-margin, default TTL/10) and a drift allowance
(1 % of the TTL) before Redis can let the next holder in, counted from the
last renewal that Redis confirmed. -grace can only make SIGKILL sooner.

If the lease ends while COMMAND runs, COMMAND's process group gets SIGTERM,
and SIGKILL -grace later, or at the local deadline if that comes first. A
lease that is not renewed ends -grace before its local deadline, but never
more than half of what its lifetime leaves after a renewal falls due (TTL/3),
so that a renewal confirmed in time keeps COMMAND running: at most 0.28×TTL
with the default margin (8.35 s for the default TTL, 835 ms for -ttl 3s).
Redis saying that the lease is not ours any more (it expired, or was broken)
ends it at once, and -max-hold when it runs out. A broken lease may be
another holder's already: then only REDLEASE_FENCE protects the target.

-lock-delay D keeps the resource from the next holder for D more after a
lease that was not released ends (redlease or its host died, froze, or lost
Redis): a target that cannot check REDLEASE_FENCE gets D more between the
end of this COMMAND and the start of the next. A released lease (COMMAND
exited) frees the resource at once.

Processes that COMMAND leaves in its group (sh -c 'job &') get SIGTERM when
it exits, and SIGKILL -grace later, or at once if the lease ends meanwhile;
the lease is released once they are gone, and the exit status stays
COMMAND's. A process that left the group (setsid) cannot be followed: it runs
on without the lease.

Ctrl-Z (SIGTSTP) stops COMMAND's group, then redlease. On SIGCONT (fg),
COMMAND is resumed if the lease is still alive; stopped longer, the lease is
gone, and COMMAND gets SIGTERM instead (SIGKILL past the local deadline, by
which its guardian, below, kills the stopped group). SIGSTOP sent to redlease
cannot be caught: when an unrenewed lease ends and redlease stays silent, the
guardian sends COMMAND's group SIGTERM, half the time left to the local
deadline later (at most a second), and SIGKILL at the deadline.

COMMAND's parent is a guardian process (redlease __guardian, in a process
group of its own) that outlives redlease. If redlease is killed (kill -9,
the OOM killer), nobody renews the lease: the guardian sends COMMAND's group
SIGTERM at once, and SIGKILL -grace later or at the lease's local deadline,
whichever comes first, so that the group is gone before Redis can let the
next holder in. Like flock(1)'s lock, this reaches only what stays in the
group: a process that left it (setsid, a daemon that detaches) is not
followed. The guardian bears redlease's name: pgrep redlease lists it, and
pkill redlease reaches it too (it ignores the SIGTERM, which redlease passes
on to COMMAND). If the guardian is killed too (pkill -9 redlease), Linux
sends COMMAND itself SIGTERM, but what COMMAND started runs on; if only the
guardian is killed, redlease stops the group and exits 1. Elsewhere than on
Linux, COMMAND is not told of its guardian's death; without Unix process
groups (Windows) there is no guardian, and COMMAND runs on unrenewed.

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
  redlease run -wait 5m -max-hold 1h -ttl 2m -grace 30s migrate -- ./migrate up
  redlease run -permits 4 encoders -- ./encode.sh "$file"
  redlease run -read catalog -- ./export-catalog
  redlease run -write -wait 10m catalog -- ./rebuild-catalog
`

func runCommand(args []string, stdout, stderr io.Writer) int {
	rf, code, done := parseRun(args, stdout, stderr)
	if done {
		return code
	}
	opts := make([]redlease.WaitOption, len(rf.flags), len(rf.flags)+1)
	for i, f := range rf.flags {
		opts[i] = f.opt
	}
	opts = append(opts, redlease.WithHolder(commandHolder(rf.argv)))
	// The lease context ends -grace (at most stopLead) before the local
	// deadline that -margin sets: COMMAND gets SIGTERM then, and SIGKILL at
	// that deadline. Added after the flags' own options, which checkInput
	// checks as the user gave them.
	opts = append(opts, redlease.WithSafetyMargin(rf.margin+rf.lead))
	ctx := context.Background()
	// As conn.open, but a command that cannot be found fails after the
	// flags are checked and before Redis is asked: its 127 or 126 must not
	// depend on Redis being up (69).
	s, err := rf.conn.session(stderr)
	if err != nil {
		return fail(stderr, "run", err)
	}
	defer s.close()
	if err := s.checkInput(input{resources: []string{rf.resource}, flags: rf.flags, kind: rf.kind}); err != nil {
		return fail(stderr, "run", err)
	}
	// exec.Command looks up only a name without a slash; LookPath also
	// checks a path, that it exists and may be executed.
	if _, err := exec.LookPath(rf.argv[0]); err != nil {
		fmt.Fprintln(stderr, "redlease run:", oneRedlease(err.Error()))
		return execStatus(err)
	}
	if err := s.connect(ctx); err != nil {
		return fail(stderr, "run", err)
	}
	s.debug("lease timing", "margin", rf.margin, "grace", rf.grace, "sigterm_before_deadline", rf.lead)
	r := &runner{s: s, resource: rf.resource, argv: rf.argv, kind: rf.kind, wait: rf.wait, grace: rf.grace, lead: rf.lead,
		slack: rf.slack, what: rf.kind.of(nil, rf.resource), stdout: stdout, stderr: stderr}
	return r.run(ctx, !rf.nowait, opts)
}

// runFlags are run's flags and arguments, checked as far as they can be
// without the library (checkInput does the rest).
type runFlags struct {
	conn     *conn
	resource string
	argv     []string
	nowait   bool
	wait     time.Duration
	grace    time.Duration
	margin   time.Duration // the lease's safety margin: -margin, else TTL/10
	lead     time.Duration // stopLead: SIGTERM this long before the local deadline
	slack    time.Duration // the guardian's: guardSlack(lead)
	kind     leaseKind
	flags    []flagOption // the lease options the flags set, in the order of the checks
}

// parseRun parses run's command line; done is true when run should end
// with code (after -h, or a mistake).
func parseRun(args []string, stdout, stderr io.Writer) (rf runFlags, code int, done bool) {
	fset := newFlagSet("run", runHelp)
	rf.conn = addConnFlags(fset)
	ttl := fset.Duration("ttl", redlease.DefaultTTL, "lease `TTL`; the lease is renewed every TTL/3")
	wait := fset.Duration("wait", 0, "wait at most this long for the lease (0: until it is acquired)")
	nowait := fset.Bool("nowait", false, "do not wait: exit 75 at once if the lease is held")
	maxHold := fset.Duration("max-hold", 0, "stop the command and let the lease go after this long (0: no limit)")
	lockDelay := fset.Duration("lock-delay", 0, "after a lease that was not released ends, nobody takes the resource for this long (see above)")
	grace := fset.Duration("grace", 10*time.Second, "how long after SIGTERM a command that must stop gets SIGKILL: never past the lease's local deadline (see above)")
	margin := fset.Duration("margin", 0, "safety margin: how long before the TTL runs out, unrenewed, the command is killed (0: TTL/10)")
	fair := fset.Bool("fair", false, "hand the lease to waiters in arrival order")
	kind := addKindFlags(fset)
	if code, done := parse(fset, args, stdout, stderr); done {
		return rf, code, true
	}
	var err error
	if rf.kind, err = kind(); err != nil {
		return rf, fail(stderr, "run", err), true
	}
	rf.nowait, rf.wait, rf.grace = *nowait, *wait, *grace
	// The lease's safety margin, as the library computes it (-margin, else
	// TTL/10).
	rf.margin = *margin
	if rf.margin == 0 {
		rf.margin = *ttl / 10
	}
	rf.lead = stopLead(*ttl, rf.margin, rf.grace)
	rf.slack = guardSlack(rf.lead)
	if err := rf.arguments(fset.Args()); err != nil {
		return rf, fail(stderr, "run", err), true
	}
	// 0 means the default for -margin and -wait; other values, negative
	// ones too, go to the library, which checks them.
	rf.flags = []flagOption{{"-ttl", *ttl, redlease.WithTTL(*ttl)}}
	if *margin != 0 {
		rf.flags = append(rf.flags, flagOption{"-margin", *margin, redlease.WithSafetyMargin(*margin)})
	}
	rf.flags = append(rf.flags, flagOption{"-max-hold", *maxHold, redlease.WithMaxHold(*maxHold)})
	rf.flags = append(rf.flags, flagOption{"-lock-delay", *lockDelay, redlease.WithLockDelay(*lockDelay)})
	if *wait != 0 {
		rf.flags = append(rf.flags, flagOption{"-wait", *wait, redlease.WithMaxWait(*wait)})
	}
	rf.flags = append(rf.flags, flagOption{"-fair", *fair, redlease.WithFair(*fair)})
	return rf, exitOK, false
}

// arguments checks the arguments after the flags, RESOURCE -- COMMAND
// [ARG...], and the flags that only run checks.
func (rf *runFlags) arguments(rest []string) error {
	switch {
	case len(rest) == 0:
		return &usageError{"no RESOURCE given"}
	case len(rest) > 1 && rest[1] != "--" && strings.HasPrefix(rest[1], "-"):
		return &usageError{fmt.Sprintf("flag %s after RESOURCE: flags go before it", rest[1])}
	case rf.nowait && rf.wait > 0:
		return &usageError{"-wait and -nowait exclude each other"}
	case rf.grace < 0:
		return &usageError{fmt.Sprintf("-grace %v: must not be negative", rf.grace)}
	}
	rf.resource, rf.argv = rest[0], rest[1:]
	if len(rf.argv) > 0 && rf.argv[0] == "--" {
		rf.argv = rf.argv[1:]
	}
	if len(rf.argv) == 0 {
		return &usageError{"no COMMAND given"}
	}
	return nil
}

// runner is one redlease run.
type runner struct {
	s        *session
	resource string
	argv     []string
	kind     leaseKind
	what     string // the lease, as messages name it after "the": `lease of "r"`
	wait     time.Duration
	grace    time.Duration
	lead     time.Duration // see stopLead
	slack    time.Duration
	stdout   io.Writer
	stderr   io.Writer
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintln(r.stderr, "redlease run:", oneRedlease(fmt.Sprintf(format, args...)))
}

func (r *runner) run(ctx context.Context, wait bool, opts []redlease.WaitOption) int {
	// Signals are caught from here on: while waiting they stop the wait,
	// while the command runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	renewals, observe := renewalNotices()
	lease, code := r.acquire(ctx, sigs, wait, append(opts, observe))
	if lease == nil {
		return code
	}
	r.what = r.kind.of(lease, r.resource)
	// Caught from before the start, so that an early Ctrl-Z waits for
	// supervise rather than stopping redlease alone. Notify with no signals
	// would catch them all.
	jobSigs := make(chan os.Signal, 4)
	if len(jobControl) > 0 {
		signal.Notify(jobSigs, jobControl...)
		defer signal.Stop(jobSigs)
	}
	j, err := startJob(jobSpec{
		argv:  r.argv,
		env:   append(os.Environ(), r.kind.env(lease, r.resource)...),
		grace: r.grace,
		lead:  r.lead,
		slack: r.slack,
		first: guardState{mode: modeRun, leaseLeft: max(time.Until(r.deadline(lease)), 0)},
		stdin: commandStdin(os.Stdin), stdout: r.stdout, stderr: r.stderr,
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
func renewalNotices() (<-chan struct{}, redlease.WaitOption) {
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
	lead      time.Duration // stopLead
	slack     time.Duration // guardSlack(lead)
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

// execStatus is redlease's exit status for a COMMAND that could not be
// looked up or started: 127 when it does not exist, 126 when it was found
// but cannot be run (a directory, not executable, or found only relative
// to "."), as a shell says.
func execStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

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
		r.say("the %s ended; the command's exit status is unknown (its guardian was killed)", r.what)
		return exitLost
	case lost != nil:
		r.say("the command exited with status %d after the %s ended", status, r.what)
		return exitLost
	case status < 0:
		return exitFailed // the guardian was killed, and the command stopped
	case errors.Is(relErr, redlease.ErrLeaseLost):
		r.say("the %s was lost before the command ended (it expired or was broken): %v; "+
			"the command exited with status %d", r.what, relErr, status)
		return exitLost
	case relErr != nil:
		r.say("release failed (the lease expires within its TTL): %v", relErr)
	}
	r.s.debug("released", "resource", r.resource, "status", status)
	return status
}

// stopLead is how long before the lease's local deadline (the one that
// -margin sets) COMMAND gets SIGTERM when no renewal was confirmed: -grace,
// but at most half of what the local lifetime leaves after a renewal falls
// due (TTL/3), so that a renewal confirmed in time, or one of its retries,
// keeps COMMAND running. The lease context ends then, and COMMAND gets
// SIGKILL at the deadline, a safety margin and the drift allowance before
// Redis can let the next holder in. The cap is 0.28×TTL with the default
// margin (TTL/10): 8.35 s for the default TTL, 30 s.
func stopLead(ttl, margin, grace time.Duration) time.Duration {
	lifetime := ttl - time.Duration(float64(ttl)*redlease.DriftFactor) - margin
	return max(min(grace, (lifetime-ttl/3)/2), 0)
}

// deadline is the lease's local deadline as -margin sets it, by which
// COMMAND's process group is gone: the lease context ends lead before it.
func (r *runner) deadline(lease *redlease.Lease) time.Time {
	return lease.Deadline().Add(r.lead)
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
