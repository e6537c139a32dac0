//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// job is COMMAND as redlease run supervises it. Without Unix process groups
// there is no guardian: should redlease die, COMMAND runs on unrenewed.
type job struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once COMMAND has exited and been waited for
}

// startJob starts COMMAND. On failure it returns a *startFailure.
func startJob(spec jobSpec) (*job, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = spec.stdin, spec.stdout, spec.stderr, spec.env
	if err := cmd.Start(); err != nil {
		return nil, &startFailure{execStatus(err), err.Error()}
	}
	j := &job{cmd: cmd, done: make(chan struct{})}
	go func() { // ends when COMMAND has exited
		defer close(j.done)
		_ = cmd.Wait() // its status is in cmd.ProcessState
	}()
	return j, nil
}

func (j *job) pid() int                   { return j.cmd.Process.Pid }
func (j *job) exitedC() <-chan struct{}   { return j.done }
func (j *job) status() int                { return j.cmd.ProcessState.ExitCode() }
func (j *job) lostGuardian() bool         { return false }
func (j *job) signal(sig os.Signal) error { return j.cmd.Process.Signal(sig) }
func (j *job) stop() error                { return nil }
func (j *job) resume() error              { return nil }
func (j *job) alive() bool                { return false }
func (j *job) tell(guardState)            {}
func (j *job) finish()                    {}
