package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// pinnedEnv tells the process that pin started that it runs pinned, and
// where: "<its CPU>,<redis-server's CPU>".
const pinnedEnv = "REDLEASE_BENCH_PINNED"

// pinning is where a pinned run puts the two processes.
type pinning struct {
	on             bool
	client, server int
}

// pinned is this run's pinning, from pinnedEnv.
var pinned pinning

// readPinned sets pinned from the environment pin set, if it did, once
// checkPinned confirms that this process runs where it says.
func readPinned() error {
	v, ok := os.LookupEnv(pinnedEnv)
	if !ok {
		return nil
	}
	c, s, found := strings.Cut(v, ",")
	client, err1 := strconv.Atoi(c)
	server, err2 := strconv.Atoi(s)
	if !found || err1 != nil || err2 != nil {
		return fmt.Errorf("%s=%q: want two CPU numbers, \"client,server\"", pinnedEnv, v)
	}
	if err := checkPinned(client); err != nil {
		return err
	}
	pinned = pinning{on: true, client: client, server: server}
	return nil
}
