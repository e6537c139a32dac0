#!/usr/bin/env bash
# model/check.sh -- model-check redlease's protocol with SPIN (docs/MODEL.md).
#
#   model/check.sh            the verification runs: every property must hold
#                             (full state-space search, zero errors), and every
#                             witness must be reached (the model is not vacuous)
#   model/check.sh -mutants   the mutants and the non-goals: each must produce a
#                             counterexample to its property, and to that one
#   model/check.sh -all       both
#
# One line per run. Exits non-zero if any run does not end as it must.
# Environment: MODEL_JOBS (runs in parallel, default 2), MODEL_CFLAGS (extra
# flags for gcc, e.g. -DCOLLAPSE to halve the memory at twice the time),
# MODEL_KEEP=1 (keep the build directory and print its path).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model="$here/redlease.pml"

mode=verify
case "${1:-}" in
  "") ;;
  -mutants) mode=mutants ;;
  -all) mode=all ;;
  -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "usage: $0 [-mutants|-all]" >&2; exit 2 ;;
esac

for tool in spin gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "model/check.sh: '$tool' not found; install it (Debian: apt-get install -y spin gcc)" >&2
    exit 2
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/redlease-model.XXXXXX")
if [ "${MODEL_KEEP:-}" = 1 ]; then
  echo "build directory: $work"
else
  trap 'rm -rf "$work"' EXIT
fi

# The properties that must hold without faults, and with them.
ALL="-DCHK_S1 -DCHK_S1R -DCHK_S2 -DCHK_S3 -DCHK_S4 -DCHK_S5 -DCHK_LX -DCHK_HELD -DCHK_RORDER -DCHK_REXCL"
FAULTY="-DCHK_S2 -DCHK_S3 -DCHK_S4 -DCHK_S5 -DCHK_REXCL"
# The faults configuration: one attempt per client and no renewals (what
# faults put at stake is the guard's, and the guard sees only fences).
FCONF="-DFAULTS -DATTEMPTS=1 -DRENEWS=0"
# Lease.Extend: one call of client 0, to the shorter TTL T2 (2 ticks; -DT2=4:
# a longer one)
EXT="-DEXTENDS=1"
# Client.Resume of client 0's token by a third lease holder, then Handoff
# (one attempt for client 0, no R1; the properties of time and of the
# resource: resume draws no fence)
RES="-DRESUME -DATTEMPTS=1 -DOTHER=0"
RESP="-DCHK_S2 -DCHK_S3 -DCHK_S4 -DCHK_S5 -DCHK_LX -DCHK_HELD -DCHK_REXCL"
# ... smaller: no renewals, one Resume attempt (for the mutants and with Break)
RESM="$RES -DRENEWS=0 -DRENEWS2=0 -DRTRIES=1"
# an operator's Client.Break and its message to the holders' Clients
BRK="-DBREAKS=1"
# the direct handoff: a release gives the lease to a waiter that asked
HO="-DHANDOFF"

# name | expectation | spin -D flags
#   pass       a full search finds no error
#   fail:P     the search stops at an assertion of property P (CHECK(P_P, ...))
verify_runs=(
  "faults|pass|$FCONF $HO -DINCR_MIX $FAULTY"
  "plain|pass|-DINCR_MIX $EXT $ALL"
  "dups|pass|-DINCR_MIX -DDUPS=1 -DATTEMPTS=1 $EXT $ALL"
  "extend-longer|pass|-DINCR_MIX $EXT -DT2=4 -DCHK_S3 -DCHK_S4 -DCHK_LX -DCHK_HELD"
  "resume|pass|$RES $RESP"
  "break|pass|$BRK $ALL -DCHK_BRK"
  "resume-break|pass|$RES -DRENEWS=0 -DRTRIES=1 $BRK $RESP -DCHK_BRK"
  "handoff|pass|$HO -DINCR_MIX $ALL"
  "witness-retry-same-fence|fail:W1|-DWITNESS=1"
  "witness-stale-write-refused|fail:W2|-DWITNESS=2"
  "witness-retried-release|fail:W3|-DWITNESS=3"
  "witness-renewal-extends|fail:W4|-DWITNESS=4"
  "witness-late-reply-given-back|fail:W6|-DWITNESS=6"
  "witness-shared-counter-gap|fail:W7|-DWITNESS=7"
  "witness-equal-fence-refused|fail:W8|$FCONF -DWITNESS=8"
  "witness-renewal-lost|fail:W5|-DFAULTS -DATTEMPTS=1 -DWITNESS=5"
  "witness-advance-fence|fail:W9|$FCONF -DWITNESS=9"
  "witness-regressed-fence-refused|fail:W10|$FCONF -DWITNESS=10"
  "witness-renewal-after-context-end|fail:W11|-DWITNESS=11"
  "witness-extend-shortens-deadline|fail:W12|$EXT -DWITNESS=12"
  "witness-renewal-with-new-ttl|fail:W13|$EXT -DWITNESS=13"
  "witness-break-ends-context|fail:W14|$BRK -DWITNESS=14"
  "witness-break-other-fence-ignored|fail:W15|$BRK -DWITNESS=15"
  "witness-resumed-shared|fail:W16|$RES -DWITNESS=16"
  "witness-resumer-renews|fail:W17|$RES -DWITNESS=17"
  "witness-break-ends-resumer|fail:W18|$RESM $BRK -DWITNESS=18"
  "witness-handoff-grant|fail:W19|$HO -DWITNESS=19"
  "witness-handoff-attempt-finds-own|fail:W20|$HO -DWITNESS=20"
)
mutant_runs=(
  "mutant-plain-del|fail:S2|-DM_PLAIN_DEL -DCHK_S2"
  "mutant-reply-deadline|fail:LX|-DM_REPLY_DEADLINE -DCHK_LX"
  "mutant-reply-deadline-s3|fail:S3|-DM_REPLY_DEADLINE -DCHK_S3"
  "mutant-incr-outside|fail:S1R|-DM_INCR_OUTSIDE -DCHK_S1R"
  "mutant-equal-fence|fail:REXCL|-DM_EQUAL_FENCE $FCONF -DRESTARTS=0 -DCHK_REXCL"
  "mutant-no-guard|fail:RORDER|-DM_NO_GUARD -DCHK_RORDER"
  "mutant-no-drift|fail:LX|-DM_NO_DRIFT -DCHK_LX"
  "mutant-sent-after-check|fail:S4|-DM_SENT_AFTER_CHECK -DCHK_S4"
  "mutant-no-start-check|fail:LX|-DM_NO_START_CHECK -DCHK_LX"
  "mutant-incr-outside-no-start-check|fail:RORDER|-DM_INCR_OUTSIDE -DM_NO_START_CHECK -DCHK_RORDER"
  "mutant-extend-no-retime|fail:S3|$EXT -DM_EXTEND_NO_RETIME -DCHK_S3"
  "mutant-extend-unserialized|fail:S3|$EXT -DT2=4 -DM_EXTEND_UNSERIALIZED -DCHK_S3"
  "mutant-resume-reply-deadline|fail:S3|$RES -DM_RESUME_REPLY_DEADLINE -DCHK_S3"
  "mutant-resume-recreate|fail:S1R|$RES -DM_RESUME_RECREATE -DCHK_S1R"
  "mutant-resume-no-owner|fail:LX|$RESM -DM_RESUME_NO_OWNER -DCHK_LX"
  "mutant-break-key-only|fail:BRK|$BRK -DM_BREAK_KEY_ONLY -DCHK_BRK"
  "mutant-break-no-fence|fail:BRK|$BRK -DM_BREAK_NO_FENCE -DCHK_BRK"
  "mutant-handoff-now|fail:S3|$HO -DM_HANDOFF_NOW -DCHK_S3"
  "mutant-handoff-now-held|fail:HELD|$HO -DM_HANDOFF_NOW -DCHK_HELD"
  "nongoal-faults-s1|fail:S1|$FCONF -DCHK_S1"
  "nongoal-faults-lx|fail:LX|$FCONF -DCHK_LX"
  "nongoal-restart-rorder|fail:RORDER|$FCONF -DFAILOVERS=0 -DCHK_RORDER"
  "nongoal-resume-shared-lx|fail:LX|$RESM -DSHARE -DCHK_LX"
  "nongoal-break-lx|fail:LX|$BRK -DBRK_STRICT -DCHK_LX"
  "observe-failover-keeps-rorder|pass|$FCONF -DRESTARTS=0 -DCHK_RORDER"
  "observe-incr-outside-client-level|pass|-DM_INCR_OUTSIDE -DCHK_S1 -DCHK_LX -DCHK_RORDER"
)

runs=()
case $mode in
  verify) runs=("${verify_runs[@]}") ;;
  mutants) runs=("${mutant_runs[@]}") ;;
  all) runs=("${verify_runs[@]}" "${mutant_runs[@]}") ;;
esac

# run_one NAME EXPECT FLAGS: writes $work/NAME/result, one line, "ok ..." or "FAIL ..."
run_one() {
  local name=$1 expect=$2 flags=$3
  local dir="$work/$name"
  mkdir -p "$dir"
  cp "$model" "$dir/redlease.pml"
  (
    cd "$dir"
    # shellcheck disable=SC2086
    if ! spin -a $flags redlease.pml >spin.out 2>&1; then
      echo "FAIL $name: spin -a failed: $(head -c 300 spin.out)"; exit
    fi
    # A full search is worth gcc's -O2 (9 s to compile, twice as fast to
    # run); a search that stops at a counterexample is not.
    local opt=-O0
    case $name in plain|dups|faults|extend-longer|resume|break|resume-break|handoff) opt=-O2 ;; esac
    # shellcheck disable=SC2086
    if ! gcc $opt -w -DSAFETY ${MODEL_CFLAGS:-} -o pan pan.c >gcc.out 2>&1; then
      echo "FAIL $name: gcc failed: $(head -c 300 gcc.out)"; exit
    fi
    local start end
    start=$(date +%s.%N)
    ./pan -m1000000 -w24 >pan.out 2>&1 || true
    end=$(date +%s.%N)
    local errors states depth mem secs
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | tail -n 1)
    states=$(sed -n 's/^ *\([0-9][0-9e.+]*\) states, stored.*/\1/p' pan.out | tail -n 1)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' pan.out | tail -n 1)
    mem=$(sed -n 's/^ *\([0-9.]*\).*total actual memory usage.*/\1/p' pan.out | tail -n 1)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    local stats="states=${states:-?} depth=${depth:-?} memory=${mem:-?}MB time=${secs}s"
    if grep -q "max search depth too small" pan.out; then
      echo "FAIL $name: the search depth bound was hit (incomplete search): $stats"; exit
    fi
    if [ -z "$errors" ]; then
      echo "FAIL $name: pan did not finish: $(tail -c 300 pan.out)"; exit
    fi
    if [ "$expect" = pass ]; then
      if [ "$errors" = 0 ]; then
        echo "ok   $name: no error, full search: $stats"
      else
        local what
        what=$(grep -m1 'assertion violated' pan.out || true)
        echo "FAIL $name: $errors error(s): $what: $stats"
      fi
      exit
    fi
    local want=${expect#fail:}
    if [ "$errors" = 0 ]; then
      echo "FAIL $name: no counterexample found for $want (it must fail): $stats"; exit
    fi
    # Replay the trail: which assertion failed (its line's tag), after how many steps.
    # shellcheck disable=SC2086
    spin -t $flags redlease.pml >trail.out 2>&1 || true
    local tag steps
    tag=$(sed -n 's/^spin: text of failed assertion: .*tag==P_\([A-Z0-9]*\).*/\1/p' trail.out | head -n 1)
    steps=$(sed -n 's/^spin: trail ends after \([0-9]*\) steps.*/\1/p' trail.out | head -n 1)
    if [ "$tag" = "$want" ]; then
      echo "ok   $name: counterexample for $want in ${steps:-?} steps: $stats"
    else
      echo "FAIL $name: the counterexample is for '${tag:-?}', not $want: $stats"
    fi
  ) >"$dir/result" 2>&1
}

jobs=${MODEL_JOBS:-2}
running=0
for r in "${runs[@]}"; do
  IFS='|' read -r name expect flags <<<"$r"
  run_one "$name" "$expect" "$flags" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

status=0
for r in "${runs[@]}"; do
  IFS='|' read -r name _ _ <<<"$r"
  if [ -s "$work/$name/result" ]; then
    cat "$work/$name/result"
  else
    echo "FAIL $name: no result"
  fi
  if ! grep -q '^ok ' "$work/$name/result" 2>/dev/null; then
    status=1
  fi
done
if [ $status = 0 ]; then
  echo "model/check.sh ($mode): all ${#runs[@]} runs as expected"
else
  echo "model/check.sh ($mode): FAILED" >&2
fi
exit $status
