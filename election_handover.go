package redlease

import (
	"context"
	"strings"

	"github.com/redlease/redlease/internal/wire"
)

// asTerm marks a lease as an election's term: its campaign may take the
// name only as a pending handover allows, and its renewals find a handover
// (acquire.lua, refresh.lua, handover.lua).
var asTerm = forLease(func(c *config) { c.term = true })

// Handover asks the election's current leader to end its term at its next
// renewal, and promises the next term to the campaigner whose value is to
// (Kubernetes' preferred holder, KEP-4355). It returns once Redis has
// recorded the request, not when the term has passed on.
//
// The leader's renewal (the watchdog's, within the renew interval, TTL/3
// by default; or a Refresh or Extend) finds the handover and is refused:
// the term's context ends with cause ErrHandover, and Redis keeps the
// term's lease, unrenewed, until the leader releases it (Resign, Release;
// Run resigns once lead returns) or its TTL runs out. Meanwhile and after,
// only a campaign with value to can win: it goes before every waiting
// campaigner, and its win ends the handover. Other campaigns, the old
// leader's included, wait; one that finds the name free wakes the
// preferred campaigner, if it waits. If to does not campaign, the handover
// expires one TTL (of this Election's options) after the term's lease would
// have, and any campaigner may win again.
//
// Handover returns ErrNoLeader if nobody leads (nothing is recorded), and
// nil without recording anything if the campaigner with value to leads
// already. A later Handover replaces an earlier one. to follows the rules
// of a value (see Campaign and WithHolder), and may not be empty: at most
// MaxHolder bytes, without NUL; otherwise Handover returns
// ErrInvalidArgument.
//
// Its limits: only campaigns of an Election (Campaign, Run) honour the
// handover; an Acquire of the name does not. The preferred campaigner is
// known by its value only: give each campaigner a value of its own. And a
// handover is as polite as the leader: a leader that ignores its context
// works on, unfenced, after its term ends, as after any other end of a
// term.
func (e *Election) Handover(ctx context.Context, to string) error {
	switch {
	case e == nil:
		return invalidf("nil Election")
	case to == "":
		return invalidf("election %s: handover to an empty value", quote(e.name))
	case len(to) > MaxHolder:
		return invalidf("election %s: handover to a value of %d bytes, over MaxHolder (%d)", quote(e.name), len(to), MaxHolder)
	case strings.IndexByte(to, 0) >= 0:
		return invalidf("election %s: handover to %q, which holds a NUL byte", quote(e.name), to)
	}
	cfg, err := e.c.leaseConfig([]string{e.name}, options(e.opts))
	if err != nil {
		return err
	}
	k := wire.KeysOf(cfg.prefix, e.name)
	n, err := wire.Int(e.c.conn.Run(ctx, wire.Handover(&k, to, (cfg.ttl+cfg.lockDelay).Milliseconds())))
	switch {
	case err != nil:
		return requestError("handover", e.name, e.c.conn.Classify(err), err)
	case n == 0:
		return errorf("election %s: %w to hand over", quote(e.name), ErrNoLeader)
	}
	return nil
}
