#!/usr/bin/env bash
# Runs the comparison benchmarks (bench/main.go) on a redis-server it starts
# on 127.0.0.1 and writes docs/BENCHMARKS.md. Needs redis-server in PATH
# (Debian: apt-get install -y redis-server). Flags are passed on, e.g.
# -quick for a smoke run, -out - to print the report instead, -parts and
# -rows to run some parts, or some rows of the pairs, parallel and hot parts
# (parts: pairs, parallel, share, hot, scale), -cpuprofile FILE to profile.
set -euo pipefail
cd "$(dirname "$0")"
exec go run . "$@"
