/*
 * redlease.pml -- a SPIN model of redlease's lease protocol (issue 16).
 *
 * docs/MODEL.md says what it proves, what it abstracts away and how to read
 * a trail; model/check.sh runs every configuration, mutant and witness.
 * Every action names, in an "abstracts:" comment, the Lua script or Go
 * function it stands for; those places name this file back.
 *
 * Compile-time switches (check.sh passes them to spin -a):
 *   CHK_<P>        check property P: S1 S1R S2 S3 S4 S5 LX HELD RORDER REXCL BRK
 *   FAULTS         a restart without persistence and a failover that loses
 *                  the last INCR (RESTARTS, FAILOVERS: how many; 1 each),
 *                  and AdvanceFence after a refused write
 *   INCR_FIRST     variant: acquire.lua INCRs before it looks at the lease
 *   INCR_MIX       either script version, chosen per call (a rolling deploy;
 *                  contains both the default and INCR_FIRST)
 *   DUPS=n         go-redis may send n requests twice (default 0)
 *   ATTEMPTS=n     acquire attempts of client 0 (default 2; client 1: 1)
 *   RENEWS=n       renewals of client 0's lease (default 1; client 1: 0)
 *   EXTENDS=n      Lease.Extend calls of client 0 (default 0; client 1: 0),
 *                  each to the second TTL T2 (default 2, shorter than T)
 *   OTHER=n        acquisitions of R1 by the third client (default 1)
 *   RESUME         a third lease holder (lease object 2, in another process)
 *                  takes up client 0's lease by its token (Client.Resume),
 *                  up to RTRIES=n attempts (default 2), RENEWS2=n renewals
 *                  (default 1); client 0 then hands off (Lease.Handoff)
 *   SHARE          with RESUME: client 0 may also Release instead of handing
 *                  off, and the resumer release while client 0 is live (the
 *                  documented misuse "shared, not moved"; a non-goal)
 *   BREAKS=n       an operator's Client.Break of R0's lease, n times (default
 *                  0), and its notification (break.lua's PUBLISH) to the
 *                  holders' Clients, delivered at any later moment or never
 *   BRK_STRICT     with BREAKS: LX, HELD and S3 do not exempt a broken lease
 *                  (a non-goal: Break is documented to break them)
 *   HANDOFF        the direct handoff: a waiter whose attempt acquire.lua
 *                  found busy leaves a handoff request with its stamp (that
 *                  attempt's send time); a release.lua that deletes its own
 *                  lease may give the lease to that waiter in the same step
 *                  (INCR, SET PX T, PUBLISH '<owner>:<fence>:<stamp>'), and
 *                  the waiter, if the message reaches it while it waits,
 *                  holds the lease with a deadline counted from the stamp
 *   M_<mutation>   a deliberately broken protocol (see check.sh -mutants)
 *   WITNESS=n      stop at reachable situation n: a test of the model itself
 *
 * Every assertion names its property (CHECK below); check.sh reads the name
 * from the failed assertion of a replayed trail.
 * printf lines starting with "@@" only run when a trail is replayed
 * (spin -t); model/trail.sh turns them into a timeline.
 */

/* ------------------------------------------------------------------ sizes */

#define NC    2          /* clients 0 and 1, who contend for R0 */
#ifdef RESUME
#define NL    3          /* lease holders: the clients, and 2 (RC), client 0's resumer */
#else
#define NL    2
#endif
#define RC    2          /* the resumer: Client.Resume of client 0's token, elsewhere */
#define NR    2          /* R0, and R1 in the same hash slot: one fence counter (issue 14) */
#define R0    0
#define R1    1
#ifndef T
#define T     3          /* the lease TTL, in ticks */
#endif
#define D     1          /* drift allowance TTL*rho, in ticks (DriftFactor) */
#define MG    1          /* safety margin, in ticks (WithSafetyMargin) */
#ifdef M_NO_DRIFT
#define LIFE  (T - MG)       /* mutant: the lifetime ignores the clock-rate error */
#else
#define LIFE  (T - D - MG)   /* config.lifetime(): TTL - TTL*DriftFactor - margin */
#endif
#define LATE  (LIFE + D)     /* the latest real time after the send at which the local
                                deadline can fire: the client's clock may run slow */
#ifndef T2
#define T2    2          /* the TTL that Lease.Extend asks for: shorter than T */
#endif
#define LIFE2 (T2 - D - MG)  /* its local lifetime (T2 = 2: 0 ticks on the client's clock) */
#define LATE2 (LIFE2 + D)    /* ... and its latest firing after the send */
#define LATE_OF(two) ((two) -> LATE2 : LATE)
#define LMAX  (LATE2 > LATE -> LATE2 : LATE)
#define EARLY (2 * D)        /* it may fire up to 2*D ticks before that (clock fast) */
#ifndef MAXF
#define MAXF  4          /* the counter's bound: beyond it, acquires are lost (bounded) */
#endif
#ifndef DUPS
#define DUPS  0
#endif
#ifndef ATTEMPTS
#define ATTEMPTS 2
#endif
#ifndef ATTEMPTS1
#define ATTEMPTS1 1
#endif
#ifndef RENEWS
#define RENEWS 1
#endif
#ifndef RENEWS1
#define RENEWS1 0
#endif
#ifndef EXTENDS
#define EXTENDS 0
#endif
#ifndef OTHER
#define OTHER 1
#endif
#ifndef WITNESS
#define WITNESS 0
#endif
#ifndef RTRIES
#define RTRIES 2
#endif
#ifndef RENEWS2
#define RENEWS2 1
#endif
#ifndef BREAKS
#define BREAKS 0
#endif
#define ATTEMPTS_OF(c) ((c) == 0 -> ATTEMPTS : ATTEMPTS1)
#define RENEWS_OF(c) ((c) == 0 -> RENEWS : RENEWS1 + ((c) / NC) * (RENEWS2 - RENEWS1))
#define EXTENDS_OF(c) ((c) == 0 -> EXTENDS : 0)
/* the renewal slots: the watchdog's and Refresh's, and Extend's. Lease.renewing
 * serializes them, so they are one slot (c); mutant M_EXTEND_UNSERIALIZED
 * gives Extend a slot of its own (c + NL), in flight beside the watchdog's */
#ifdef M_EXTEND_UNSERIALIZED
#define NS    (2 * NL)
#define XS(c) ((c) + NL)
#else
#define NS    NL
#define XS(c) (c)
#endif
/* the owner token of client c's acquisition (3: R1's holder); the resumer's
 * is client 0's, from the token */
#define OWN(c)  ((c) + 1 - 2 * ((c) / NC))   /* 1, 2; RC: 1 */
#define PEER(c) (1 - (c))
#define BIT(n)  (1 << (n))

/* lease states (leaseState in lock.go); ACQ and DONE are the client's */
#define IDLE      0
#define ACQ       1      /* the acquire call is under way */
#define ACTIVE    2      /* stateActive: the lease context is live */
#define LOST      3      /* stateLost: Redis said the lease is not ours */
#define LAPSED    4      /* stateLapsed: the local deadline passed */
#define RELEASED  5      /* stateReleased */
#define DISCARDED 6      /* stateDiscarded: never handed out */
#define DONE      7      /* the client has finished */

/* requests */
#define KACQ   1         /* acquire.lua */
#define KREL   2         /* release.lua, from Lease.Release */
#define KADV   3         /* advance.lua, from Client.AdvanceFence */
#define KINCR  4         /* mutant M_INCR_OUTSIDE: a plain INCR after the SET NX */
#define KLEAVE 5         /* release.lua, from acquisition.leave (nobody waits for it) */
#define KRES   6         /* resume.lua, from Client.Resume */
#define EMPTY   0
#define SENT    1        /* go-redis will send it (again): it runs later (Net) */
#define REPLY   2        /* it ran; the reply is on its way back */
#define GONE    3        /* the request or its reply was lost: the call fails */
#define PENDING 4        /* a renewal checked and timed, not yet written out */
#define CHECKED 5        /* mutant M_SENT_AFTER_CHECK: checked, not yet timed */

/* ------------------------------------------------------------- the clients */

byte st[NL];             /* lease state */
byte fen[NL];            /* Lease.fence */
byte dl[NL];             /* ticks left until the latest firing of the local deadline */
byte acqAge[NL];         /* ticks since the awaited acquire attempt was sent */
byte renAge[NS];         /* ticks since the renewal in flight was sent ('sent') */
byte tries[NL];          /* attempts made (ATTEMPTS) */
byte renews[NL];         /* renewals made (RENEWS) */
byte exts[NL];           /* Extend calls made (EXTENDS) */
bool cur2[NL];           /* the lease's TTL is T2 (Lease.tm, stored by retime) */
bool unk[NL];            /* an attempt's outcome is unknown (waitFor's 'unknown') */
byte refused[NL];        /* FAULTS: a refusal's Newest, for AdvanceFence */

/* client c's call in flight (an acquire attempt, a release, AdvanceFence) */
byte mk[NL];             /* its request */
byte ms[NL];             /* its state */
byte ma[NL];             /* its argument: AdvanceFence's atLeast; KINCR's grant (ghost) */
byte mv[NL];             /* the reply: a fence, or 0 (busy); release: 1 or 0 */
byte mg[NL];             /* ghost: the grant the reply is about */
/* ... and the renewal in flight, per slot (NS) */
byte rs[NS];
byte rv[NS];             /* its reply: 1 or 0 */
bool rk2[NS];            /* it asks for T2 (refreshCall's ttlArg) */
byte dups = DUPS;
byte tokf;               /* RESUME: client 0's Lease.Token, passed on: its fence (0: not yet) */
#if BREAKS > 0
byte breaks = BREAKS;
byte bo, bf;             /* the Break's message '<owner>:<fence>:<R0's lease key>' */
byte bpend;              /* the Clients it is still on its way to: BIT(0) clients 0 and 1
                            (one Client), BIT(1) the resumer's (it watches client 0's channel) */
#endif

/* ghosts: read by the properties only */
byte gen[NL];            /* the grant (count of leases Redis created for R0) of c's lease */
byte crem[NL];           /* S3: 1 + ticks left of the lifetime (of the TTL it asked for)
                            since the send of the last confirmed acquire or renew that
                            moved the deadline; 0: past */
byte rrem[NL];           /* S3: the same since Redis last set the lease's TTL (the run
                            of an acquire, at its send, or of a renew), confirmed or not */
byte began[NL];          /* the peer's fence if it was handed out before c began, else 0 */
bool delown[NL];         /* a Release of c's deleted c's own lease (for its verdict) */

#ifdef HANDOFF
/* the direct handoff, per client (waiter) c */
bool hq[NL];             /* Redis: c's handoff request ('>' .. member in the alive hash) */
byte hqAge[NL];          /*   ticks since the send of the attempt that left its stamp
                              (capped at LATE: a stamp that old can grant nothing) */
bool hm[NL];             /* a release handed c the lease: its message is on its way, or
                            waits in the hub (hub.handed) for the waiter's next claim */
byte hmAge[NL];          /*   ticks since its stamp's send (< LATE, else it is dropped) */
byte hmf[NL];            /*   its fence */
byte hmg[NL];            /*   ghost: the grant it is */
byte hoAge[NL];          /*   ghost (S3): ticks since release.lua SET the handed lease */
#endif

/* ------------------------------------------------------------------ Redis */

byte kttl[NR];           /* <prefix>{R}:lease is present iff kttl > 0 (its PX, in ticks) */
byte kown[NR];           /*   its owner */
byte kfen[NR];           /*   its fence */
byte kgen[NR];           /*   ghost: the grant it is */
byte xown[NR];           /* <prefix>{R}:released, the release marker: the owner of the
                            lease it keeps, or 0 */
byte ctr;                /* the slot's fence counter, shared by R0 and R1 */
byte grants[NR];         /* ghost: leases Redis created for R */
byte hifen[NR];          /* ghost: the highest fence drawn for a lease of R */
byte fgen[NR];           /* ghost: the latest grant of R that drew its fence */
byte restarts, failovers;
byte lastincr;           /* FAULTS: R+1 if the last write was an acquire that INCRed for R */
bool lastset;            /*   and it SET the lease too */

/* ---------------------------------------------------------- the resource */

byte gnew;               /* the guard's record for R0's data: newest fence accepted */
byte gown;               /*   and its owner */
byte wgen;               /* ghost: the grant of the last accepted write */
byte wlast;              /* ghost: the owner of the last accepted write */
byte closed;             /* ghost: owners whose writes another owner's accepted write followed */

hidden byte hv, hg, hi, hf;   /* temporaries within one atomic step; not state */

/* A ghost is updated only when a checked property reads it: unread ghosts
 * would tell apart states that are the same. */
#if defined(CHK_RORDER) || defined(CHK_S1R)
#define GEN_(x) x
#else
#define GEN_(x) skip
#endif
#ifdef CHK_S1
#define S1_(x) x
#else
#define S1_(x) skip
#endif
#ifdef CHK_S1R
#define S1R_(x) x
#else
#define S1R_(x) skip
#endif
#ifdef CHK_S2
#define S2_(x) x
#else
#define S2_(x) skip
#endif
#ifdef CHK_S3
#define S3_(x) x
#else
#define S3_(x) skip
#endif
#ifdef CHK_REXCL
#define REX_(x) x
#else
#define REX_(x) skip
#endif
#ifdef FAULTS
#define F_(x) x
#else
#define F_(x) skip
#endif
#ifdef HANDOFF
#define HO_(x) x
/* the waiter a release by lease holder c may hand R0 to: the other client */
#define HOPEER(c) ((c) == 1 -> 0 : 1)
/* the handoff message to c is gone (taken, too old, or its waiter stopped waiting) */
#define HO_DROP(c) hm[c] = 0; hmAge[c] = 0; hmf[c] = 0; GEN_(hmg[c] = 0); S3_(hoAge[c] = 0)
/* ... and its request is forgotten when it finishes (no step without HANDOFF) */
#define HO_FINISH(c) ; hq[c] = 0; hqAge[c] = 0; HO_DROP(c)
#else
#define HO_(x) skip
#define HO_FINISH(c)
#endif
#if WITNESS == 20
byte hofen;              /* witness only: the fence of the last handed lease */
#endif

#define EV printf   /* an event of the timeline (runs in replays only) */

/* Every assertion names its property: CHECK(P_x, cond) asserts cond, and a
 * replayed trail prints the name in the failed assertion's text ("tag" is
 * never equal to a property, so the assertion is just cond). */
mtype = { P_S1, P_S1R, P_S2, P_S3, P_S4, P_S5, P_LX, P_HELD, P_RORDER, P_REXCL,
          P_W1, P_W2, P_W3, P_W4, P_W5, P_W6, P_W7, P_W8, P_W9, P_W10, P_W11,
          P_W12, P_W13, P_BRK, P_W14, P_W15, P_W16, P_W17, P_W18, P_W19, P_W20 };
hidden mtype tag;
#define CHECK(p, cond) assert((cond) || tag == p)
#define WIT(n) CHECK(P_W##n, WITNESS != n)   /* a witness: the search stops there */

/* ------------------------------------------------------------- properties */

/* S1: two acquisitions of R0 that were handed out have different fences,
 * and one that returned before the other began has the smaller one. */
#ifdef CHK_S1
#define S1_HANDOUT(c) CHECK(P_S1, fen[c] != fen[PEER(c)] && fen[c] > began[c])
#else
#define S1_HANDOUT(c) skip
#endif
/* S1R, S1 at Redis (issue 14's wording): every lease Redis creates for R
 * has, from its creation, a fence above those of all earlier leases of R:
 * fences are drawn in the order in which the leases were created. */
#ifdef CHK_S1R
#define S1R_DRAW(r, f, g) CHECK(P_S1R, (f) > hifen[r] && (g) >= fgen[r])
#else
#define S1R_DRAW(r, f, g) skip
#endif
/* S2: renew and release change a lease only while it holds their owner
 * token, and Release reports nil only if a release of its own deleted it. */
#ifdef CHK_S2
#define S2_MUTATE(r, o) CHECK(P_S2, kttl[r] > 0 && kown[r] == (o))
#define S2_VERDICT(c, ok) CHECK(P_S2, !(ok) || delown[c])
#else
#define S2_MUTATE(r, o) skip
#define S2_VERDICT(c, ok) skip
#endif
/* S4: a renewal's send time ('sent') is one at which its lease was live. */
#ifdef CHK_S4
#define S4_SEND(c) CHECK(P_S4, st[c] == ACTIVE)
#else
#define S4_SEND(c) skip
#endif
/* S5: the guard accepts iff f > newest, or f == newest from newest's owner. */
#ifdef CHK_S5
#define S5_ACCEPT(f, o) CHECK(P_S5, gnew == 0 || (f) > gnew || ((f) == gnew && (o) == gown))
#else
#define S5_ACCEPT(f, o) skip
#endif
/* RORDER: an accepted write never comes from an earlier holder (in Redis's
 * order of grants) than an accepted write before it: a stale holder's write
 * after a newer holder's accepted write is refused. */
#ifdef CHK_RORDER
#define RORDER_ACCEPT(g) CHECK(P_RORDER, (g) >= wgen)
#else
#define RORDER_ACCEPT(g) skip
#endif
/* REXCL: once another owner's write was accepted after owner o's, no write
 * of o is accepted again: each owner's accepted writes are one block. */
#ifdef CHK_REXCL
#define REXCL_ACCEPT(o) CHECK(P_REXCL, !(closed & BIT(o)))
#else
#define REXCL_ACCEPT(o) skip
#endif

/* BROKEN(c): c's lease is the one an operator's Break removed. Break is
 * documented to end exclusion for it (the next holder may start before
 * the broken holder's context ends; only fences protect): LX, HELD and
 * the Redis half of S3 exempt it, and the resource properties do not. */
#if BREAKS > 0 && !defined(BRK_STRICT)
#define BROKEN(c) (bo == OWN(c) && bf == fen[c])
#else
#define BROKEN(c) false
#endif
#define LIVE(c) (st[c] == ACTIVE)
/* BRK: a break message ends a lease context only when Redis no longer
 * holds that context's lease (its owner with its fence): it never ends a
 * lease that is still held, another lease of the Client's or of the owner */
#ifdef CHK_BRK
#define BRK_END(c) CHECK(P_BRK, !(kttl[R0] > 0 && kown[R0] == OWN(c) && kfen[R0] == fen[c]))
#else
#define BRK_END(c) skip
#endif
#define LIVEX(c) (LIVE(c) && !BROKEN(c))
/* LX: never two live contexts of different owners (the resumer shares
 * client 0's owner: Resume shares a lease, it does not move it) */
#ifdef RESUME
#define LX_OK   (!(LIVEX(0) && LIVEX(1)) && !(LIVEX(1) && LIVEX(RC)))
#else
#define LX_OK   (!(LIVEX(0) && LIVEX(1)))
#endif
#define HELD(c) (!LIVEX(c) || (kttl[R0] > 0 && kown[R0] == OWN(c) && kfen[R0] == fen[c]))
#define S3B(c)  (!LIVE(c) || (crem[c] > 0 && (rrem[c] > 0 || BROKEN(c))))
#ifdef RESUME
#define ALL_(m) (m(0) && m(1) && m(RC))
#else
#define ALL_(m) (m(0) && m(1))
#endif
/* S3's bound for a send age ticks ago that asked for TTL T2 (two) or T */
#define REM(two, age) ((age) <= LATE_OF(two) -> LATE_OF(two) - (age) + 1 : 0)

/* The invariants, checked in every state. */
active proctype Monitor() {
end:
  do
  :: false
#ifdef CHK_LX
  /* LX, exclusion at the lease: never two live lease contexts for R0 */
  :: atomic { !LX_OK -> CHECK(P_LX, LX_OK) }
#endif
#ifdef CHK_HELD
  /* HELD: a live lease context is backed by its lease in Redis, same fence */
  :: atomic { !ALL_(HELD) -> CHECK(P_HELD, ALL_(HELD)) }
#endif
#ifdef CHK_S3
  /* S3: a live context is at most LATE ticks (LATE2 for T2) past the send
   * of its last confirmed acquire or renew, TTL(1-rho) - margin of the TTL
   * that send asked for on the client's clock; and at most as much past
   * the moment Redis last set its TTL, whether the reply came or not: it
   * ends a margin before Redis could hand the lease on */
  :: atomic { !ALL_(S3B) -> CHECK(P_S3, ALL_(S3B)) }
#endif
  od
}

/* ------------------------------------------------------------ abstract time */

#define NOTDUE(c) (st[c] != ACTIVE || dl[c] > 0)
#ifdef RESUME
#define ALLNOTDUE (NOTDUE(0) && NOTDUE(1) && NOTDUE(RC))
#else
#define ALLNOTDUE (NOTDUE(0) && NOTDUE(1))
#endif

/* abstracts: the passage of time. One tick for everyone: Redis expires the
 * lease (PX), the clients' monotonic clocks move on. A tick cannot pass a
 * live lease context whose deadline timer must fire now (Lease.onDeadline
 * is a timer, whatever the client's goroutines do; its latency is what the
 * margin is for). Any other step of a client -- between checking its
 * context and writing, between sending and handling a reply, before a
 * Release -- may wait any number of ticks: that is the process pause. */
active proctype Tick() {
end:
  do
  :: d_step {
       ALLNOTDUE ->
       EV("@@ tick\n");
       if
       :: kttl[R0] > 0 -> kttl[R0]--;
          if
          :: kttl[R0] == 0 -> EV("@@ Redis: the lease of owner %d on R0 expires\n", kown[R0]);
             kown[R0] = 0; kfen[R0] = 0; GEN_(kgen[R0] = 0)
          :: else -> skip
          fi
       :: else -> skip
       fi;
       hi = 0;
       do
       :: hi < NL ->
          if
          :: st[hi] == ACTIVE -> dl[hi]--;
             S3_(if :: crem[hi] > 0 -> crem[hi]-- :: else -> skip fi;
                 if :: rrem[hi] > 0 -> rrem[hi]-- :: else -> skip fi)
          :: else -> skip
          fi;
          if
          :: st[hi] == ACQ && ms[hi] != EMPTY && acqAge[hi] < LATE -> acqAge[hi]++
          :: else -> skip
          fi;
          if
          :: rs[hi] != EMPTY && renAge[hi] < LMAX -> renAge[hi]++
          :: else -> skip
          fi;
#ifdef M_EXTEND_UNSERIALIZED
          if
          :: rs[XS(hi)] != EMPTY && renAge[XS(hi)] < LMAX -> renAge[XS(hi)]++
          :: else -> skip
          fi;
#endif
#ifdef HANDOFF
          if
          :: hq[hi] && hqAge[hi] < LATE -> hqAge[hi]++
          :: else -> skip
          fi;
          if
          :: hm[hi] && hmAge[hi] + 1 < LATE -> hmAge[hi]++; S3_(hoAge[hi]++)
          :: hm[hi] && hmAge[hi] + 1 >= LATE -> HO_DROP(hi)   /* too old to grant
                                  anything: the waiter's claim attempts instead */
          :: else -> skip
          fi;
#endif
          hi++
       :: else -> break
       od;
       hi = 0
     }
  /* the release marker's TTL (what the lease had left) runs out: the model
   * allows any moment, which gives more behaviours, not fewer */
  :: atomic { xown[R0] != 0 -> EV("@@ Redis: the release marker of owner %d expires\n", xown[R0]); xown[R0] = 0 }
  od
}

/* ---------------------------------------------------------- Redis scripts */

/* FAULTS: an acquire that INCRed can be lost by a failover as long as it is
 * the last write; any later write means that it was replicated. */
#define WROTE F_(lastincr = 0; lastset = 0)
#define INCRED(r, set) F_(lastincr = (r) + 1; lastset = set)

/* abstracts: acquire.lua (the lease and the fence; the queue and the
 * wake-up only delay a grant and are left out, except, with HANDOFF, the
 * handoff request a busy attempt leaves, which run_req records);
 * acquire_all.lua, per key.
 * Sets hv, the reply (a fence, or 0: busy), and hg, the grant (ghost). */
inline acquire_lua(o, r) {
#if defined(INCR_FIRST)
  ctr++; INCRED(r, 0); hf = 1;       /* variant: INCR before looking */
#elif defined(INCR_MIX)
  if                                 /* either version, per call */
  :: ctr < MAXF -> ctr++; INCRED(r, 0); hf = 1
  :: hf = 0
  fi;
#endif
  if
  :: kttl[r] > 0 && kown[r] == (o) ->
     /* ours already: an earlier attempt whose reply was lost; PEXPIRE, and
      * the same fence */
     WIT(1);
     kttl[r] = T; hv = kfen[r]; GEN_(hg = kgen[r]); WROTE;
     EV("@@ R%d acquire.lua by owner %d: already ours, PEXPIRE, same fence %d\n", r, o, hv)
#if WITNESS == 20
     ; if :: r == R0 && hofen > 0 && hv == hofen -> WIT(20) :: else -> skip fi   /* the handed lease */
#endif
#ifdef M_INCR_OUTSIDE
     ; hv = 1
#endif
  :: kttl[r] == 0 ->
     /* free: take() -- INCR the slot's counter and SET the lease, one step */
     kown[r] = o; kttl[r] = T;
     GEN_(grants[r]++; kgen[r] = grants[r]; hg = grants[r]);
#ifdef M_INCR_OUTSIDE
     kfen[r] = 0; hv = 1; WROTE;     /* mutant: SET NX only; the client INCRs next */
     EV("@@ R%d SET NX by owner %d: the lease is taken (no fence yet)\n", r, o)
#else
     if :: hf == 0 -> ctr++ :: else -> skip fi;
     EV("@@ R%d acquire.lua by owner %d: free, INCR -> fence %d, lease SET (PX %d)\n", r, o, ctr, T);
     S1R_DRAW(r, ctr, grants[r]);
     S1R_(hifen[r] = ctr); GEN_(fgen[r] = grants[r]); kfen[r] = ctr; hv = ctr;
     INCRED(r, 1)
#endif
  :: else -> hv = 0;                 /* held by another owner: busy */
     EV("@@ R%d acquire.lua by owner %d: busy (held by owner %d)\n", r, o, kown[r])
  fi;
  hf = 0
}

#ifdef M_INCR_OUTSIDE
/* mutant: a plain INCR of the counter, which the client sends after its
 * SET NX succeeded; g is the grant it is for (ghost) */
inline incr(r, g) {
  ctr++;
  EV("@@ R%d INCR for grant %d -> fence %d\n", r, g, ctr);
  S1R_DRAW(r, ctr, g);
  S1R_(hifen[r] = ctr); GEN_(fgen[r] = g); hv = ctr; hg = g; INCRED(r, 0)
}
#endif

/* abstracts: refresh.lua (compare-and-renew), for the renewal in slot rj:
 * PEXPIRE with the TTL it asks for (rk2: T2, else T) */
inline refresh_lua(rc, rj) {
  if
  :: kttl[R0] > 0 && kown[R0] == OWN(rc) ->
     S2_MUTATE(R0, OWN(rc));
     if :: st[rc] != ACTIVE -> WIT(11) :: else -> skip fi;   /* renews a lease whose context ended */
     if :: rk2[rj] -> kttl[R0] = T2 :: else -> kttl[R0] = T fi; hv = 1; WROTE;
     S3_(if :: st[rc] == ACTIVE -> rrem[rc] = REM(rk2[rj], 0) :: else -> skip fi);
     EV("@@ R0 refresh.lua by owner %d: ours, PEXPIRE %d\n", OWN(rc), kttl[R0])
  :: else -> hv = 0;
     EV("@@ R0 refresh.lua by owner %d: not ours -> 0\n", OWN(rc))
  fi
}

#ifdef HANDOFF
/* abstracts: release.lua's direct handoff, after its own lease was deleted
 * (deleted == 1): if the first live waiter asked for a handoff, INCR the
 * slot's counter, take the waiter out of the queue (ZREM, HDEL of its alive
 * entry and request), SET the lease to it with the new fence and its TTL
 * (PX T), and PUBLISH '<owner>:<fence>:<stamp>' on its Client's wake
 * channel. Whether the waiter is first and live is not tracked: the handoff
 * may not happen (then the release wakes it, or nobody: an attempt of its
 * own follows). A stamp LATE or more old grants nothing: no message then
 * (the waiter's claim would attempt instead; its attempt, or its leave,
 * finds the lease its own). Beyond the counter's bound, no handoff. */
inline handoff_lua(c) {
  hi = HOPEER(c);
  if
  :: hq[hi] && ctr < MAXF ->
     ctr++;
     kown[R0] = OWN(hi); kttl[R0] = T; kfen[R0] = ctr;
     GEN_(grants[R0]++; kgen[R0] = grants[R0]);
     S1R_DRAW(R0, ctr, grants[R0]);
     S1R_(hifen[R0] = ctr); GEN_(fgen[R0] = grants[R0]);
#if WITNESS == 20
     hofen = ctr;
#endif
     EV("@@ R0 release.lua hands the lease to owner %d: INCR -> fence %d, SET (PX %d), PUBLISH (stamp %d ticks old)\n", OWN(hi), ctr, T, hqAge[hi]);
     if
     :: hqAge[hi] < LATE ->
        hm[hi] = 1; hmAge[hi] = hqAge[hi]; hmf[hi] = ctr; GEN_(hmg[hi] = grants[R0]); S3_(hoAge[hi] = 0)
     :: else -> HO_DROP(hi)
     fi;
     hq[hi] = 0; hqAge[hi] = 0
  :: else -> skip                     /* not first, not live, or no handoff */
  fi;
  hi = 0
}

/* abstracts: acquisition.claim (waiter.go), when a release handed the
 * waiter the lease (hub.handed, from the wake-up message) and the handoff
 * is fresh: grant(ctx, sent, fence) with sent = the stamp, the send time
 * of the waiter's attempt that Redis ran before the release: Lease.start's
 * deadline, sent + lifetime. The model grants at every stamp age at which
 * the local deadline may still be ahead (LATE), a superset of the code's
 * 'age <= lifetime/2'; older messages are dropped (Tick): the claim
 * attempts instead. */
inline handed(c) {
#ifdef M_HANDOFF_NOW
  dl[c] = LATE;                        /* mutant: the deadline counts from the message */
#else
  dl[c] = LATE - hmAge[c];
#endif
  st[c] = ACTIVE; fen[c] = hmf[c]; GEN_(gen[c] = hmg[c]);
  S3_(crem[c] = REM(0, hmAge[c]); rrem[c] = REM(0, hoAge[c]));
  EV("@@ c%d: handed the lease, fence %d, stamp %d ticks old; its context ends within %d ticks\n", c, hmf[c], hmAge[c], dl[c]);
  S1_HANDOUT(c);
  S1_(began[c] = 0);
  WIT(19);
  HO_DROP(c)
}
#endif

/* abstracts: release.lua (compare-and-delete, by RENAME to the released
 * key, which answers a retried release; with HANDOFF its direct handoff,
 * handoff_lua; the rest of the queue and the wake-up left out) */
inline release_lua(c) {
#ifdef M_PLAIN_DEL
  /* mutant: DEL <prefix>{R}:lease, whoever holds it */
  if
  :: kttl[R0] > 0 ->
     EV("@@ R0 DEL by owner %d: deletes the lease of owner %d\n", OWN(c), kown[R0]);
     S2_MUTATE(R0, OWN(c));
     S2_(if :: kown[R0] == OWN(c) && mk[c] == KREL -> delown[c] = 1 :: else -> skip fi);
     kttl[R0] = 0; kown[R0] = 0; kfen[R0] = 0; GEN_(kgen[R0] = 0); hv = 1; WROTE
  :: else -> hv = 0; EV("@@ R0 DEL by owner %d: no lease\n", OWN(c))
  fi
#else
  if
  :: kttl[R0] > 0 && kown[R0] == OWN(c) ->
     S2_MUTATE(R0, OWN(c));
     S2_(if :: mk[c] == KREL -> delown[c] = 1 :: else -> skip fi);
     xown[R0] = kown[R0];                        /* RENAME lease -> released */
     kttl[R0] = 0; kown[R0] = 0; kfen[R0] = 0; GEN_(kgen[R0] = 0); hv = 1; WROTE;
     EV("@@ R0 release.lua by owner %d: ours, RENAME to the released key -> 1\n", OWN(c))
#ifdef HANDOFF
     ; handoff_lua(c)
#endif
  :: else ->
     if
     :: xown[R0] == OWN(c) -> hv = 1;            /* an earlier release of ours did it */
        WIT(3);
        EV("@@ R0 release.lua by owner %d: gone, but the released key is ours -> 1\n", OWN(c))
     :: else -> hv = 0;
        EV("@@ R0 release.lua by owner %d: not ours -> 0\n", OWN(c))
     fi
  fi
#endif
}

/* abstracts: resume.lua, kind 'x' (Client.Resume): only while the token's
 * owner holds the lease with the token's fence, and then PEXPIRE to the
 * full TTL in the same step. Sets hv (1: taken up, 0: not) and hg. */
inline resume_lua(c) {
  if
#ifdef M_RESUME_NO_FENCE
  :: kttl[R0] > 0 && kown[R0] == OWN(c) ->   /* variant: the owner only, not the fence */
#else
  :: kttl[R0] > 0 && kown[R0] == OWN(c) && kfen[R0] == fen[c] ->
#endif
     S2_MUTATE(R0, OWN(c));
     kttl[R0] = T; hv = 1; GEN_(hg = kgen[R0]); WROTE;
     EV("@@ R0 resume.lua by owner %d, fence %d: held, PEXPIRE %d -> 1\n", OWN(c), fen[c], T)
#ifdef M_RESUME_RECREATE
  :: kttl[R0] == 0 ->
     /* mutant: SET the lease again when it is gone (no check that it
      * exists): an expired or released lease comes back with its old fence */
     kown[R0] = OWN(c); kfen[R0] = fen[c]; kttl[R0] = T; hv = 1; WROTE;
     GEN_(grants[R0]++; kgen[R0] = grants[R0]; hg = grants[R0]);
     S1R_DRAW(R0, fen[c], grants[R0]);
     EV("@@ R0 resume.lua by owner %d: gone, SET again with fence %d\n", OWN(c), fen[c])
#endif
#ifdef M_RESUME_NO_OWNER
  :: kttl[R0] > 0 && kown[R0] != OWN(c) ->
     /* mutant: PEXPIRE whatever lease is there, without comparing owners */
     kttl[R0] = T; hv = 1; GEN_(hg = kgen[R0]); WROTE;
     EV("@@ R0 resume.lua by owner %d: owner %d's lease, PEXPIRE anyway -> 1\n", OWN(c), kown[R0])
#endif
  :: else -> hv = 0;
     EV("@@ R0 resume.lua by owner %d, fence %d: not held -> 0\n", OWN(c), fen[c])
  fi
}

#if BREAKS > 0
/* abstracts: break.lua with fence 0 (Client.Break): DEL R0's lease,
 * whoever holds it; the counter and the release marker untouched; PUBLISH
 * '<owner>:<fence>:<lease key>' on the holder's Client's break channel.
 * (A Break with a fence removes the lease only if it has that fence: a
 * subset of these behaviours.) */
inline break_lua() {
  breaks--;
  bo = kown[R0]; bf = kfen[R0];
#ifdef RESUME
  bpend = BIT(0) | BIT(1);
#else
  bpend = BIT(0);
#endif
  EV("@@ Break: R0's lease of owner %d, fence %d, removed; its holder's Client is told\n", bo, bf);
  kttl[R0] = 0; kown[R0] = 0; kfen[R0] = 0; GEN_(kgen[R0] = 0); WROTE
}
#endif

/* abstracts: advance.lua (the slot's counter to at least a, never back) */
inline advance_lua(a) {
  if
  :: ctr < a -> ctr = a; WIT(9)
  :: else -> skip
  fi;
  WROTE;
  EV("@@ advance.lua to at least %d: the counter is %d\n", a, ctr)
}

#ifdef INCR_FIRST
#define ACQ_CAN(r) (ctr < MAXF)
#else
#define ACQ_CAN(r) (kttl[r] > 0 || ctr < MAXF)
#endif
/* Redis can run client c's request within the counter's bound */
#define CAN_EXEC(c) ((mk[c] != KACQ || ACQ_CAN(R0)) && (mk[c] != KINCR || ctr < MAXF))
/* someone waits for its reply (not for leave's release or AdvanceFence) */
#define AWAITED(c) (mk[c] != KLEAVE && mk[c] != KADV)

/* Redis runs client c's request mk[c], as one script. */
inline run_req(c) {
  if
  :: mk[c] == KACQ -> acquire_lua(OWN(c), R0)
#ifdef HANDOFF
     /* busy: queue, and leave the handoff request with the stamp of this
      * attempt's send (it replaces an earlier one); taken: out of the queue */
     ; if
     :: hv == 0 -> hq[c] = 1; hqAge[c] = acqAge[c]
     :: else -> hq[c] = 0; hqAge[c] = 0
     fi
  :: mk[c] == KLEAVE -> hq[c] = 0; hqAge[c] = 0; release_lua(c)   /* ZREM, HDEL of member */
  :: mk[c] == KREL -> release_lua(c)
#else
  :: mk[c] == KREL || mk[c] == KLEAVE -> release_lua(c)
#endif
#ifdef RESUME
  :: mk[c] == KRES -> resume_lua(c)
#endif
#ifdef FAULTS
  :: mk[c] == KADV -> advance_lua(ma[c])
#endif
#ifdef M_INCR_OUTSIDE
  :: mk[c] == KINCR -> incr(R0, ma[c])
#endif
  fi
}

/* ... and its reply comes back (REPLY: read when the caller gets to it),
 * is lost (GONE: the call ends with a request error, the outcome unknown),
 * or go-redis sends the request again after a connection reset (SENT: it
 * runs once more, later, in Net; at most DUPS times in a run). */
inline reply(c) {
  if
  :: AWAITED(c) -> ms[c] = REPLY; mv[c] = hv; GEN_(mg[c] = hg)
  :: AWAITED(c) -> ms[c] = GONE; EV("@@ c%d: the reply is lost\n", c)
  :: !AWAITED(c) -> ms[c] = EMPTY; mk[c] = 0; ma[c] = 0
  :: dups > 0 -> dups--; ms[c] = SENT; EV("@@ c%d: the connection resets; go-redis will resend\n", c)
  fi;
  hv = 0; hg = 0
}

/* A request runs in Redis when it is sent, or is lost on the way. (Its
 * delay on the way is folded into the time before the send, which is
 * arbitrary: the deadline counts from the send, and a later run only gives
 * the lease more time in Redis. docs/MODEL.md, "What it abstracts".) */
inline send(c) {
  if
  :: CAN_EXEC(c) -> run_req(c); reply(c)
  :: AWAITED(c) -> ms[c] = GONE; EV("@@ c%d: the request is lost\n", c)
  :: !AWAITED(c) -> ms[c] = EMPTY; mk[c] = 0; ma[c] = 0
  fi
}

/* abstracts: go-redis's retry (cmd retries after a bad connection): the
 * second run of a request. Only started when DUPS > 0. */
proctype Net(byte c) {
end:
  do
  :: atomic { ms[c] == SENT -> send(c) }
  :: atomic { rs[c] == SENT ->
       refresh_lua(c, c);
       if
       :: rs[c] = REPLY; rv[c] = hv
       :: rs[c] = EMPTY; renAge[c] = 0; rk2[c] = 0
       fi;
       hv = 0 }
  od
}

/* abstracts: acquire.lua on R1, the other resource of the slot, by a third
 * client (owner 3) that the model does not follow further: it holds R1 to
 * the end (renewed, so Tick does not age it) and nothing reads R1's lease.
 * What matters is that it draws from the counter R0 shares. */
active proctype Other() {
  byte n = OTHER;
end:
  do
  :: atomic { n > 0 && ACQ_CAN(R1) -> n--; acquire_lua(3, R1); hv = 0; hg = 0 }
  od
}

#ifdef FAULTS
#ifndef RESTARTS
#define RESTARTS 1
#endif
#ifndef FAILOVERS
#define FAILOVERS 1
#endif
/* abstracts: the faults of the README's "Repairing the fence counter" and
 * "Keeping fences across failover": operations, not code. */
active proctype Faults() {
  restarts = RESTARTS; failovers = FAILOVERS;
end:
  do
  :: atomic { restarts > 0 ->
       /* a restart without persistence: every key of the slot is gone */
       restarts--;
       kttl[R0] = 0; kown[R0] = 0; kfen[R0] = 0; GEN_(kgen[R0] = 0); xown[R0] = 0;
       kttl[R1] = 0; kown[R1] = 0; kfen[R1] = 0; GEN_(kgen[R1] = 0); xown[R1] = 0;
       ctr = 0; WROTE;
       EV("@@ Redis restarts without persistence: every key gone, the counter 0\n") }
  :: atomic { failovers > 0 && lastincr > 0 ->
       /* a failover to a replica that missed the last write: an acquire
        * script that INCRed (and its SET, if it took the lease) */
       failovers--; ctr--;
       if
       :: lastset -> hi = lastincr - 1;
          kttl[hi] = 0; kown[hi] = 0; kfen[hi] = 0; GEN_(kgen[hi] = 0); hi = 0
       :: else -> skip
       fi;
       WROTE;
       EV("@@ Redis fails over to a replica that missed the last INCR: the counter is %d\n", ctr) }
  od
}
#endif

/* ----------------------------------------------------------- the client */

/* abstracts: the resource's guard -- fencing/lua/check.lua (RedisGuard,
 * FencedScript), SQLGuard.Check, RowGuard.Cond, HTTPGuard with a
 * FenceStore; the rule is admits() in guard.go. Check and write are one
 * atomic step. */
inline guard_write(c) {
#ifdef M_NO_GUARD
  hv = 1;                                        /* mutant: the resource checks nothing */
#elif defined(M_EQUAL_FENCE)
  hv = (gnew == 0 || fen[c] >= gnew);            /* mutant: an equal fence from anyone */
#else
  hv = (gnew == 0 || fen[c] > gnew || (fen[c] == gnew && OWN(c) == gown));
#endif
  if
  :: hv ->
     EV("@@ c%d writes with fence %d: accepted\n", c, fen[c]);
#ifndef M_NO_GUARD
     S5_ACCEPT(fen[c], OWN(c));
     gnew = fen[c]; gown = OWN(c);
#endif
     RORDER_ACCEPT(gen[c]);
     REX_(if :: wlast != 0 && wlast != OWN(c) -> closed = closed | BIT(wlast) :: else -> skip fi);
     REXCL_ACCEPT(OWN(c));
     GEN_(wgen = gen[c]); REX_(wlast = OWN(c))
  :: else ->
     EV("@@ c%d writes with fence %d: REFUSED, the newest accepted is %d\n", c, fen[c], gnew);
     if :: st[c] != ACTIVE -> WIT(2) :: else -> skip fi;
     if :: fen[c] == gnew && OWN(c) != gown -> WIT(8) :: else -> skip fi;
     if :: st[c] == ACTIVE && fen[c] < gnew -> WIT(10) :: else -> skip fi;
     F_(refused[c] = gnew)                       /* *StaleFenceError{Newest} */
  fi;
  hv = 0
}

/* abstracts: Lease.start -- the first local deadline, from the attempt's
 * send time -- and the hand-out in acquisition.attempt; a reply that comes
 * after the deadline is given back (acquisition.giveBack). hv: the fence,
 * hg: the grant (ghost). */
inline start(c) {
#ifdef HANDOFF
  HO_DROP(c);                          /* the waiter returns: the hub forgets a handoff */
#endif
#ifdef M_REPLY_DEADLINE
  if
  :: true ->                           /* mutant: the deadline counts from the reply */
     dl[c] = LATE;
#elif defined(M_NO_START_CHECK)
  if
  :: true ->                           /* mutant: hand out even after the deadline */
     dl[c] = (acqAge[c] < LATE -> LATE - acqAge[c] : 0);
#else
  if
  :: acqAge[c] < LATE ->
     dl[c] = LATE - acqAge[c];
#endif
     st[c] = ACTIVE; fen[c] = hv; GEN_(gen[c] = hg);
     S3_(crem[c] = REM(0, acqAge[c]); rrem[c] = crem[c]);
     EV("@@ c%d: acquired, fence %d; its context ends within %d ticks\n", c, hv, dl[c]);
     S1_HANDOUT(c);
     S1_(began[c] = 0);
     if :: fen[PEER(c)] > 0 && fen[c] == fen[PEER(c)] + 2 -> WIT(7) :: else -> skip fi
  :: else ->
     st[c] = DISCARDED; S1_(began[c] = 0);
     WIT(6);
     EV("@@ c%d: the reply came after the local deadline: given back\n", c)
  fi;
  acqAge[c] = 0
}

#ifdef RESUME
/* abstracts: Client.takeUp -> Lease.start(sent): the resumed lease's first
 * local deadline counts from the send time of the resume request; a reply
 * after it is not handed out (discard: the lease stays in Redis, it is not
 * this call's to release). hv: 1 if resume.lua took it up, hg: the grant. */
inline resumed(c) {
#ifdef M_RESUME_REPLY_DEADLINE
  if
  :: true ->                           /* mutant: the deadline counts from the reply */
     dl[c] = LATE;
#else
  if
  :: acqAge[c] < LATE ->
     dl[c] = LATE - acqAge[c];
#endif
     st[c] = ACTIVE; GEN_(gen[c] = hg);
     S3_(crem[c] = REM(0, acqAge[c]); rrem[c] = crem[c]);
     EV("@@ c%d: resumed owner %d's lease, fence %d; its context ends within %d ticks\n", c, OWN(c), fen[c], dl[c]);
     if :: LIVE(0) -> WIT(16) :: else -> skip fi   /* shared: both hold it */
  :: else ->
     st[c] = DISCARDED;
     EV("@@ c%d: the resume reply came after the local deadline: not handed out\n", c)
  fi;
  acqAge[c] = 0
}
#define RESUME_SEND(c) EV("@@ c%d: Resume of owner %d's token, fence %d, attempt %d\n", c, OWN(c), tokf, tries[c] + 1); \
  acqAge[c] = 0; tries[c]++; SEND(c, KRES, 0)
#endif

#define SEND(c, k, a) mk[c] = k; ma[c] = a; send(c)
#define TAKE(c) hv = mv[c]; hg = mg[c]; ms[c] = EMPTY; mk[c] = 0; ma[c] = 0; mv[c] = 0; mg[c] = 0
#define TIMEOUT(c) ms[c] = EMPTY; mk[c] = 0; ma[c] = 0

/* abstracts: acquisition.attempt -- 'sent := time.Now()', the acquire
 * script */
#define ATTEMPT(c) EV("@@ c%d: acquire attempt %d\n", c, tries[c] + 1); \
  acqAge[c] = 0; tries[c]++; SEND(c, KACQ, 0)
/* abstracts: acquisition.leave -- release.lua by owner token, best effort
 * (with HANDOFF it also takes the owner out of the queue, and deletes a
 * lease a release handed it, which may hand that lease on) */
#define LEAVE(c) EV("@@ c%d: gives up; releases by owner (leave)\n", c); \
  unk[c] = 0; SEND(c, KLEAVE, 0)
#define FINISH(c) st[c] = DONE; tries[c] = 0; renews[c] = 0; exts[c] = 0; cur2[c] = 0; \
  unk[c] = 0; F_(refused[c] = 0); dl[c] = 0; S3_(crem[c] = 0; rrem[c] = 0); S1_(began[c] = 0) \
  HO_FINISH(c)

/* abstracts: acquisition.try / acquisition.waitFor, after an attempt that
 * did not get the lease: again under the same owner token (after a busy
 * reply and a wake-up or backoff, or a request error), or stop (ctx ended,
 * retries ran out): acquisition.giveUp, which leaves if an outcome was
 * unknown or, with HANDOFF, if it queued (a.queued: unk is set then too) */
inline again(c) {
  if
  :: tries[c] < ATTEMPTS_OF(c) -> ATTEMPT(c)
  :: unk[c] -> LEAVE(c); FINISH(c)
  :: !unk[c] -> FINISH(c)
  fi
}

/* who may Release when: with RESUME (not SHARE), client 0 once it passed
 * its token hands off instead, and the resumer releases once client 0's
 * context has ended (hand off first: the lease is shared, not moved) */
#define RELEASES(c) (((c) != 0 || tokf == 0) && ((c) != RC || st[0] != ACTIVE))

proctype Client(byte c) {
#ifdef RESUME
  if
  :: c == RC -> goto resume
  :: else -> skip
  fi;
#endif
  /* abstracts: Client.Acquire / TryAcquire -> Client.acquire, newOwner:
   * one owner token for every attempt */
acquire:
  atomic { st[c] = ACQ; S1_(began[c] = fen[PEER(c)]); ATTEMPT(c) }
acquiring:
  /* abstracts: acquisition.attempt, from the reply on (decode, Lease.start,
   * the hand-out); acquisition.try / waitFor on an error or a busy reply */
  if
  :: atomic { ms[c] == REPLY && mk[c] == KACQ ->
       TAKE(c);                        /* acquisition.decode */
       if
       :: hv > 0 ->
#ifdef M_INCR_OUTSIDE
          SEND(c, KINCR, hg)           /* mutant: the SET NX succeeded; now INCR */
#else
          start(c);
          if :: st[c] == DISCARDED -> LEAVE(c); FINISH(c) :: else -> skip fi
#endif
       :: else -> EV("@@ c%d: busy\n", c);
#ifdef HANDOFF
          unk[c] = 1                   /* queued (a.queued): a release may hand it the
                                          lease, so giving up leaves (acquisition.giveUp) */
#else
          unk[c] = 0; again(c)         /* someone else holds it: no attempt of ours does */
#endif
       fi;
       hv = 0; hg = 0 }
#ifdef M_INCR_OUTSIDE
  :: atomic { ms[c] == REPLY && mk[c] == KINCR ->
       TAKE(c); start(c);
       if :: st[c] == DISCARDED -> LEAVE(c); FINISH(c) :: else -> skip fi;
       hv = 0; hg = 0 }
  :: atomic { ms[c] == GONE && mk[c] == KINCR -> TIMEOUT(c); LEAVE(c); FINISH(c) }
#endif
  :: atomic { ms[c] == GONE && mk[c] == KACQ ->
       EV("@@ c%d: the attempt's outcome is unknown\n", c);
#ifdef HANDOFF
       TIMEOUT(c); unk[c] = 1 }
#else
       TIMEOUT(c); unk[c] = 1; again(c) }
#endif
  fi;
#ifdef HANDOFF
  if
  :: st[c] == ACQ && ms[c] == EMPTY -> goto waiting
  :: st[c] == ACQ && ms[c] != EMPTY -> goto acquiring
  :: st[c] == ACTIVE -> goto hold
  :: else -> goto end
  fi;
  /* abstracts: waitFor's loop, between attempts (acquisition.claim): the
   * lease a release handed over, if its message has come and is fresh;
   * else an attempt (after a wake-up, the timer, or an error), or the end
   * of the wait (ctx ended, retries ran out: giveUp, which leaves) */
waiting:
  if
  :: atomic { hm[c] -> handed(c) }
  :: atomic { again(c) }
  fi;
  if
  :: st[c] == ACQ -> goto acquiring
  :: st[c] == ACTIVE -> skip
  :: else -> goto end
  fi;
#else
  if
  :: st[c] == ACQ -> goto acquiring
  :: st[c] == ACTIVE -> skip
  :: else -> goto end
  fi;
#endif
#ifdef RESUME
  goto hold;

  /* abstracts: Client.Resume, in another process, of client 0's token
   * (resource, owner, fence, TTL): the lease object RC */
resume:
end_token:
  atomic { tokf > 0 -> st[c] = ACQ; fen[c] = tokf; RESUME_SEND(c) }
resuming:
  if
  :: atomic { ms[c] == REPLY ->
       TAKE(c);
       if
       :: hv > 0 -> resumed(c);
          if :: st[c] == DISCARDED -> FINISH(c) :: else -> skip fi
       :: else -> EV("@@ c%d: Resume: ErrLeaseLost\n", c); FINISH(c)
       fi;
       hv = 0; hg = 0 }
  :: atomic { ms[c] == GONE ->
       /* ErrOutcomeUnknown: Resume may be called again */
       TIMEOUT(c);
       if
       :: tries[c] < RTRIES -> RESUME_SEND(c)
       :: FINISH(c)
       fi }
  fi;
  if
  :: st[c] == ACQ -> goto resuming
  :: st[c] == ACTIVE -> skip
  :: else -> goto end
  fi;
#endif

  /* The holder's own code (beside this client's Watchdog and Timer). */
hold:
  do
  :: atomic { st[c] == ACTIVE ->        /* action check */
       /* 'lease.Context().Err() == nil': the holder believes it holds the
        * lease, and may pause here for any time before its write lands */
       EV("@@ c%d: its context is live; it goes to write\n", c) }
write:
     atomic { guard_write(c) }
#ifdef RESUME
  :: atomic { c == 0 && tokf == 0 && st[c] == ACTIVE ->   /* action token */
       /* abstracts: Lease.Token, passed to another process (the resumer) */
       tokf = fen[c];
       EV("@@ c%d: passes its token on (fence %d)\n", c, tokf) }
  :: atomic { c == 0 && tokf > 0 ->                  /* action handoff */
       /* abstracts: Lease.Handoff: the context ends (ErrHandedOff) if it
        * was live, the watchdog and the timer stop; nothing is sent, and a
        * later Release does nothing */
       EV("@@ c%d: Handoff: its context ends, the lease stays in Redis\n", c);
       FINISH(c) };
     goto end
#endif
#ifdef FAULTS
  :: atomic { refused[c] > 0 && ms[c] == EMPTY ->   /* action advance */
       /* abstracts: Client.AdvanceFence(resource, StaleFenceError.Newest) */
       EV("@@ c%d: AdvanceFence(R0, %d)\n", c, refused[c]);
       SEND(c, KADV, refused[c]); refused[c] = 0 }
#endif
#if defined(RESUME) && !defined(SHARE)
  :: RELEASES(c) -> break
#else
  :: break    /* Release, explicit or deferred: on every path, context ended or not */
#endif
  od;

  /* abstracts: Lease.Release -> Lease.beginRelease: the context ends first
   * (endLocked), then release.lua; no request for a lease that Redis
   * already said is not ours */
release:
  atomic {
    ms[c] == EMPTY ->
    F_(refused[c] = 0);
    EV("@@ c%d: Release\n", c);
    if
    :: st[c] == LOST -> FINISH(c)
    :: st[c] == ACTIVE -> st[c] = RELEASED; dl[c] = 0; S3_(crem[c] = 0; rrem[c] = 0); SEND(c, KREL, 0)
    :: else -> SEND(c, KREL, 0)
    fi }
releasing:
  if
  :: atomic { ms[c] == REPLY ->
       /* abstracts: Lease.endRelease */
       TAKE(c);
       EV("@@ c%d: Release returns %d (1: nil, 0: ErrLeaseLost)\n", c, hv);
       S2_VERDICT(c, hv == 1);
       S2_(delown[c] = 0); hv = 0; hg = 0;
       FINISH(c) }
  :: atomic { ms[c] == GONE ->
       TIMEOUT(c);
       EV("@@ c%d: Release: ErrOutcomeUnknown\n", c);
       if
       :: SEND(c, KREL, 0)             /* the caller calls Release again */
       :: S2_(delown[c] = 0); FINISH(c)
       fi }
     if
     :: st[c] != DONE -> goto releasing
     :: else -> skip
     fi
  :: st[c] == DONE -> skip
  fi;
end:
  skip
}

/* abstracts: watchdog.send (the pipeline goes out, some time after the
 * check) and Lease.renew's request: refresh.lua runs for client wc's
 * renewal in slot wj */
inline wsend(wc, wj) {
  EV("@@ c%d: the renewal goes out (TTL %d)\n", wc, (rk2[wj] -> T2 : T));
  refresh_lua(wc, wj);
  if
  :: rs[wj] = REPLY; rv[wj] = hv
  :: rs[wj] = EMPTY; renAge[wj] = 0; rk2[wj] = 0   /* lost, request or reply: Lease.renewed
                                                   (sent, false, err) changes nothing */
  :: dups > 0 && wj == wc -> dups--; rs[wj] = SENT /* go-redis sends it again */
  fi;
  hv = 0
}

/* abstracts: Lease.renewed(sent, ok, nil), Lease.extendLocked: the
 * deadline moves to the send plus the lifetime of the lease's TTL now
 * (timing(): T2 after an Extend), if later */
inline wrenewed(wc, wj) {
  if
  :: st[wc] != ACTIVE -> skip                /* ended meanwhile: nothing */
  :: st[wc] == ACTIVE && rv[wj] == 0 ->
     st[wc] = LOST; dl[wc] = 0; S3_(crem[wc] = 0; rrem[wc] = 0);   /* endLocked(stateLost) */
     WIT(5);
     EV("@@ c%d: the renewal says not ours: context ends (lost)\n", wc)
  :: st[wc] == ACTIVE && rv[wj] == 1 ->
#ifdef M_REPLY_DEADLINE
     if
     :: LATE_OF(cur2[wc]) > dl[wc] ->
        dl[wc] = LATE_OF(cur2[wc]); S3_(crem[wc] = REM(rk2[wj], renAge[wj]))
     :: else -> skip
     fi;
#else
     if                                     /* extendLocked(sent) */
     :: LATE_OF(cur2[wc]) > renAge[wj] && LATE_OF(cur2[wc]) - renAge[wj] > dl[wc] ->
        dl[wc] = LATE_OF(cur2[wc]) - renAge[wj]; S3_(crem[wc] = REM(rk2[wj], renAge[wj]));
        WIT(4)
#ifdef RESUME
        ; if :: wc == RC -> WIT(17) :: else -> skip fi   /* the resumer renews its lease */
#endif
     :: else -> skip
     fi;
#endif
     EV("@@ c%d: renewed; its context ends within %d ticks\n", wc, dl[wc])
  fi;
  rs[wj] = EMPTY; rv[wj] = 0; renAge[wj] = 0; rk2[wj] = 0
}

/* abstracts: the watchdog -- watchdog.renew, watchdog.send -- and
 * Lease.Refresh and Lease.Extend, which go through Lease.renew; Lease.renewed
 * and Lease.extendLocked for the reply; Lease.retime for Extend. A renewal
 * may go at any time (no schedule: every interval is covered), one at a
 * time: Lease.renewing (a semaphore: watchdog.renewBatch takes it if it
 * is free, Refresh and Extend wait for it) lets one renew request of the
 * lease be in flight. */
proctype Watchdog(byte c) {
end:
  do
  :: atomic { st[c] == ACTIVE && rs[c] == EMPTY && renews[c] < RENEWS_OF(c) ->   /* action renew */
       /* watchdog.renew: 'sent := time.Now()', then the check
        * (beginRenewal, with the renewal slot; Refresh: liveUntil): active,
        * and sent before the deadline; the TTL is the lease's now */
       renews[c]++; rk2[c] = cur2[c];
       if :: cur2[c] -> WIT(13) :: else -> skip fi;   /* the watchdog renews with T2 */
#ifdef M_SENT_AFTER_CHECK
       rs[c] = CHECKED }                         /* mutant: the check first ... */
  :: atomic { rs[c] == CHECKED ->
       renAge[c] = 0;                            /* ... 'sent' after it */
       S4_SEND(c);
       rs[c] = PENDING }
#else
       renAge[c] = 0;
       S4_SEND(c);
       rs[c] = PENDING }
#endif
  :: atomic { st[c] == ACTIVE && rs[XS(c)] == EMPTY && exts[c] < EXTENDS_OF(c) ->   /* action extend */
       /* Lease.Extend(ctx, T2) -> Lease.renew: 'sent', the check, then
        * Lease.retime: the TTL is T2 from now on, and the local deadline
        * the earlier of the one before and sent + LIFE2 (Redis may apply
        * T2 even if the reply is lost) */
       exts[c]++; renAge[XS(c)] = 0;
       S4_SEND(c);
       cur2[c] = 1; rk2[XS(c)] = 1;
#ifndef M_EXTEND_NO_RETIME
       if
       :: LATE2 < dl[c] -> dl[c] = LATE2; WIT(12)
       :: else -> skip
       fi;
#endif
       EV("@@ c%d: Extend to TTL %d; its context ends within %d ticks\n", c, T2, dl[c]);
       rs[XS(c)] = PENDING }
  :: atomic { rs[c] == PENDING -> wsend(c, c) }      /* action send */
  :: atomic { rs[c] == REPLY -> wrenewed(c, c) }     /* action renewed */
#ifdef M_EXTEND_UNSERIALIZED
  /* mutant: Extend's request in flight beside the watchdog's */
  :: atomic { rs[XS(c)] == PENDING -> wsend(c, XS(c)) }
  :: atomic { rs[XS(c)] == REPLY -> wrenewed(c, XS(c)) }
#endif
  od
}

#if BREAKS > 0
/* abstracts: Client.onBreak -> Client.endBroken, for the lease holder c:
 * it ends c's lease with ErrLeaseLost (endLocked(stateLost)) if it is
 * active and the message names its owner, fence and lease key (R0) */
inline onbreak(c) {
  if
#if defined(M_BREAK_KEY_ONLY)
  :: st[c] == ACTIVE ->                /* mutant: by the lease key only */
#elif defined(M_BREAK_NO_FENCE)
  :: st[c] == ACTIVE && OWN(c) == bo -> /* mutant: by owner and key, not the fence */
#else
  :: st[c] == ACTIVE && OWN(c) == bo && fen[c] == bf ->
#endif
     BRK_END(c);
     st[c] = LOST; dl[c] = 0; S3_(crem[c] = 0; rrem[c] = 0);
     WIT(14);
     if :: c == RC -> WIT(18) :: else -> skip fi   /* the resumer's, on client 0's channel */
     EV("@@ c%d: the break message: its context ends (lost)\n", c)
  :: else ->
     if :: st[c] == ACTIVE && OWN(c) == bo -> WIT(15) :: else -> skip fi   /* its owner, another fence */
  fi
}

/* abstracts: an operator's Client.Break (break.lua) at any moment, and
 * the message on each break channel: read by the Client at any later
 * moment, or never (a lost message: the holder then finds out at its next
 * renewal). Clients 0 and 1 are taken to be one Client, so that the match
 * must tell their leases apart; the resumer's is another. */
active proctype Operator() {
end:
  do
  :: atomic { breaks > 0 && kttl[R0] > 0 -> break_lua() }
  :: atomic { bpend & BIT(0) -> bpend = bpend & ~BIT(0);
       EV("@@ the Client of c0 and c1 reads the break message (owner %d, fence %d)\n", bo, bf);
       onbreak(0); onbreak(1) }
#ifdef RESUME
  :: atomic { bpend & BIT(1) -> bpend = bpend & ~BIT(1);
       EV("@@ the resumer's Client reads the break message (owner %d, fence %d)\n", bo, bf);
       onbreak(RC) }
#endif
  od
}
#endif

/* abstracts: Lease.onDeadline, the timer that Lease.start sets and
 * extendLocked moves. It fires in the window that the clock-rate error
 * allows; Tick does not let time pass the window's end. */
proctype Timer(byte c) {
end:
  do
  :: atomic { st[c] == ACTIVE && dl[c] <= EARLY ->   /* action deadline */
       st[c] = LAPSED; dl[c] = 0; S3_(crem[c] = 0; rrem[c] = 0);   /* endLocked(stateLapsed) */
       EV("@@ c%d: the local deadline passes: its context ends\n", c) }
  od
}

init {
  atomic {
    run Client(0); run Watchdog(0); run Timer(0);
    run Client(1); run Watchdog(1); run Timer(1);
#ifdef RESUME
    run Client(RC); run Watchdog(RC); run Timer(RC);
#endif
#if DUPS > 0
    run Net(0); run Net(1)
#endif
  }
}
