package main

import (
	"io"
	"os"
	"os/exec"
)

// job is COMMAND as redlease run supervises it: started in a process group
// of its own, so that signals reach everything it starts.
type job struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once COMMAND has exited and been waited for
}

// startJob starts argv with env and the given standard streams.
func startJob(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*job, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = stdin, stdout, stderr, env
	setGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j := &job{cmd: cmd, done: make(chan struct{})}
	go func() { // ends when COMMAND has exited
		defer close(j.done)
		_ = cmd.Wait() // its status is in cmd.ProcessState
	}()
	return j, nil
}

// pid is COMMAND's process id, and its process group's.
func (j *job) pid() int { return j.cmd.Process.Pid }

// exited is closed once COMMAND has exited.
func (j *job) exited() <-chan struct{} { return j.done }

// status is COMMAND's exit status, once it has exited.
func (j *job) status() int { return exitStatus(j.cmd.ProcessState) }

// signal sends sig to COMMAND's process group.
func (j *job) signal(sig os.Signal) error { return signalGroup(j.cmd.Process, sig) }

// stop stops COMMAND's process group (Ctrl-Z).
func (j *job) stop() error { return stopGroup(j.cmd.Process) }

// resume continues COMMAND's process group.
func (j *job) resume() error { return resumeGroup(j.cmd.Process) }

// alive reports whether COMMAND's process group, whose leader has exited,
// still has a member that runs.
func (j *job) alive() bool { return groupAlive(j.cmd.Process) }
