#!/usr/bin/env bash
# model/trail.sh -- find a short counterexample and print it as a timeline.
#
#   model/trail.sh -DM_NO_GUARD -DCHK_RORDER      (the flags of a check.sh run)
#
# It runs pan with iterative shortening (-i), replays the shortest trail
# with spin -t and keeps the model's "@@" events, numbering the ticks of
# abstract time. docs/MODEL.md shows one such timeline. Builds in a
# temporary directory; MODEL_KEEP=1 keeps it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in spin gcc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "model/trail.sh: '$tool' not found (apt-get install -y spin gcc)" >&2; exit 2; }
done
[ $# -gt 0 ] || { sed -n '2,10p' "$0"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/redlease-trail.XXXXXX")
if [ "${MODEL_KEEP:-}" = 1 ]; then echo "build directory: $work" >&2; else trap 'rm -rf "$work"' EXIT; fi
cp "$here/redlease.pml" "$work/"
cd "$work"
spin -a "$@" redlease.pml >/dev/null
gcc -O2 -w -DSAFETY -DREACH -o pan pan.c
./pan -m1000000 -w24 -i >pan.out 2>&1 || true
if ! [ -f redlease.pml.trail ]; then
  echo "model/trail.sh: no counterexample: $(grep -m1 'errors:' pan.out)" >&2
  exit 1
fi
spin -t "$@" redlease.pml >replay.out 2>&1 || true
steps=$(sed -n 's/^spin: trail ends after \([0-9]*\) steps.*/\1/p' replay.out | head -n 1)
prop=$(sed -n 's/^spin: text of failed assertion: .*tag==P_\([A-Z0-9]*\).*/\1/p' replay.out | head -n 1)
echo "# spin $*: counterexample for $prop, $steps steps (shortest found by pan -i)"
awk '
  /^ *@@ tick/ { t++; next }
  /^ *@@ / { sub(/^ *@@ /, ""); printf "t=%-2d  %s\n", t, $0; next }
  /^spin: text of failed assertion/ { sub(/^spin: text of failed assertion: /, ""); printf "t=%-2d  VIOLATED: %s\n", t, $0 }
' replay.out
