package main

import (
	"bytes"
	"os"
	"strconv"
)

// onlyZombies reports whether every process still in process group pgid is
// a zombie: exited, and only waiting to be collected by its parent. It reads
// /proc, as pgrep -g does, and reports false if it cannot, or if it finds no
// member at all: the caller knows the group exists, so its members are
// hidden from this process (/proc mounted with hidepid), not gone.
func onlyZombies(pgid int) bool {
	dir, err := os.Open("/proc")
	if err != nil {
		return false
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return false
	}
	found := false
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and
		// parentheses, so the fields are counted from its last ')'.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(data[i+1:])
		if len(f) < 3 {
			continue
		}
		if pg, err := strconv.Atoi(string(f[2])); err != nil || pg != pgid {
			continue
		}
		if s := f[0]; len(s) != 1 || (s[0] != 'Z' && s[0] != 'X') {
			return false
		}
		found = true
	}
	return found
}
