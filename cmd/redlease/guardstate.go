package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// guardState is what redlease run tells the guardian of its command (see
// guardian_unix.go) whenever it changes: one line holding the whole state,
// so that the guardian needs only the latest line.
type guardState struct {
	mode byte // modeRun, modeHold, modeStop or modeDone
	// leaseLeft is the time to the lease's local deadline (the one -margin
	// sets: see stopLead) when the line was written, 0 once it has passed.
	// The group must be gone by then, in every mode: after it, Redis may
	// let the next holder in. Relative, because the guardian's clock
	// readings are not redlease's.
	leaseLeft time.Duration
	// killLeft is, in modeStop, the time to redlease's SIGKILL of the group.
	killLeft time.Duration
	// sent is monotonicNow() when the line was written, 0 where there is no
	// clock that both processes share. The guardian subtracts the time the
	// line took to reach it.
	sent time.Duration
}

// The modes of a guardState.
const (
	modeRun  = 'r' // the lease is alive, and the command runs under it
	modeHold = 'h' // Ctrl-Z: the group is stopped, and redlease stops itself
	modeStop = 's' // redlease is ending the group: it sent SIGTERM, SIGKILL is due in killLeft
	modeDone = 'd' // the group is gone, or given up on: the guardian may exit
)

func (s guardState) encode() []byte {
	return fmt.Appendf(nil, "%c %d %d %d\n", s.mode, s.leaseLeft, s.killLeft, s.sent)
}

func decodeGuardState(line string) (guardState, error) {
	f := strings.Fields(line)
	if len(f) != 4 || len(f[0]) != 1 || !strings.Contains("rhsd", f[0]) {
		return guardState{}, fmt.Errorf("bad state %q", line)
	}
	s := guardState{mode: f[0][0]}
	for i, d := range []*time.Duration{&s.leaseLeft, &s.killLeft, &s.sent} {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return guardState{}, fmt.Errorf("bad state %q", line)
		}
		*d = time.Duration(n)
	}
	return s, nil
}

// transit is how long ago, by the clock both processes share, the state
// was sent: 0 without one.
func (s guardState) transit(now time.Duration) time.Duration {
	if s.sent == 0 || now < s.sent {
		return 0
	}
	return now - s.sent
}

// maxGuardSlack bounds guardSlack.
const maxGuardSlack = time.Second

// guardSlack is how long the guardian gives redlease, when it is alive but
// silent past the moment it would have acted (the end of an unrenewed
// lease's context, lead before its local deadline, or its own SIGKILL),
// before it acts in its place: redlease stopped with SIGSTOP, or stuck.
// Half the lead, so that the guardian's SIGTERM leaves COMMAND half of it
// before SIGKILL at the deadline, which no slack delays; at most
// maxGuardSlack, which is enough for a redlease that is merely slow.
func guardSlack(lead time.Duration) time.Duration {
	return max(min(maxGuardSlack, lead/2), 0)
}
