#!/usr/bin/env bash
# Runs the comparison benchmarks (bench/main.go) on a redis-server it starts
# on 127.0.0.1 and writes docs/BENCHMARKS.md. Needs redis-server in PATH
# (Debian: apt-get install -y redis-server). Flags are passed on, e.g.
# -quick for a smoke run, -out - to print the report instead, -parts and
# -rows to run some parts, or some rows of the pairs, parallel and hot parts
# (parts: pairs, parallel, share, hot, scale), -pin to run the client and
# redis-server on a core each, -cpuprofile FILE to profile. A relative path
# is read from the directory this script was called from.
set -euo pipefail
bin="${TMPDIR:-/tmp}/redlease-bench"
(cd "$(dirname "$0")" && go build -o "$bin" .)
exec "$bin" "$@"
