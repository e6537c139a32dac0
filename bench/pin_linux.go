//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// pin runs this program again confined to one CPU, and records another for
// redis-server (pinServer), in the environment of the new process.
//
// Unpinned, on a small machine, an uncontended pair's time depends on where
// the scheduler puts the client and the server: on the same core a pair
// took about 40 µs here, on two cores 110–190 µs (a wake-up crosses cores),
// and a round of 2,000 pairs could land in either, so the rounds of one row
// ranged over up to 5× and the medians of two rows crossed from run to run.
// With each on a core of its own every round pays the same crossing.
//
// The affinity of the thread that calls execve is kept by the new process,
// whose Go runtime then runs with GOMAXPROCS 1.
func pin() error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	client, server, err := twoCPUs(&set)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(client)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	env := append(os.Environ(), fmt.Sprintf("%s=%d,%d", pinnedEnv, client, server))
	err = syscall.Exec(exe, os.Args, env)
	return fmt.Errorf("-pin: run %s again: %w", exe, err)
}

// checkPinned reports an error unless this process may run on cpu alone.
func checkPinned(cpu int) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	if set.Count() != 1 || !set.IsSet(cpu) {
		return fmt.Errorf("-pin: %s says CPU %d, but this process may run on %d CPUs", pinnedEnv, cpu, set.Count())
	}
	return nil
}

// cpuSetSize is how many CPUs a unix.CPUSet can name (glibc's CPU_SETSIZE).
const cpuSetSize = 1024

// twoCPUs returns the first two CPUs of set: one for this process, one for
// redis-server.
func twoCPUs(set *unix.CPUSet) (client, server int, err error) {
	var cpus []int
	for cpu := 0; cpu < cpuSetSize && len(cpus) < 2; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return 0, 0, fmt.Errorf("-pin needs two CPUs; this process may run on %d", set.Count())
	}
	return cpus[0], cpus[1], nil
}

// pinServer confines every thread of the process pid to the CPU pinned
// records for redis-server.
func pinServer(pid int) error {
	var one unix.CPUSet
	one.Set(pinned.server)
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return fmt.Errorf("pin redis-server: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &one); err != nil {
			return fmt.Errorf("pin redis-server's thread %d: %w", tid, err)
		}
	}
	return nil
}
