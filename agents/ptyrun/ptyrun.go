// Package ptyrun runs an agent's process in its own session and process
// group, so that killing it kills everything it started, and reads its
// output without losing the tail when it exits: either under a real
// pseudo-terminal (Start), streaming the bytes as terminal-output events, or
// with stdout as a pipe of lines (StartPipe), for agents that print JSON.
package ptyrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"reeve.dev/reeve/agents"
)

// Default terminal size: wide enough that agents do not wrap every line,
// tall enough for full-screen programs to lay out.
const (
	DefaultRows = 40
	DefaultCols = 120
)

// DefaultDrainTimeout is how long output may stay silent after the process
// exited before its leftover children are killed and reading stops.
const DefaultDrainTimeout = time.Second

// ErrKilled is in a Result's Err when the process ended because Kill,
// Terminate or the context ended it.
var ErrKilled = errors.New("killed")

// Result is how a process ended.
type Result struct {
	// ExitCode is the exit status, or -1 when a signal ended the process.
	ExitCode int
	// Signal is the signal that ended the process, or 0.
	Signal syscall.Signal
	// Killed is true when Kill, Terminate or the context asked it to end.
	Killed bool
	// Err describes a process that did not exit 0: "exit status 3", "killed
	// by signal terminated", or wraps ErrKilled. Nil for a clean exit.
	Err error
	// Stderr is the tail of standard error (StartPipe only).
	Stderr string
}

// Process is a started process and the goroutines reading its output.
type Process struct {
	cmd    *exec.Cmd
	pgid   int
	master *os.File // the PTY master; nil for StartPipe
	stdin  *os.File // the write end of stdin, for StartPipe with Stdin
	reaper *reaper  // the worker's side of the reaper the program runs under

	// argv and env are what the program was started with (before the
	// reaper wrapped it), for Launched.
	argv, env []string

	exited chan struct{} // closed when the leader has been reaped
	done   chan struct{} // closed when the output is drained too
	res    Result

	mu     sync.Mutex
	killed bool
	ended  bool // done is closed; the process group may be gone or reused
}

// Launched is the program's path and arguments, and its environment, as
// given to Start or StartPipe (the reaper that runs it is not part of it).
// They hold secrets as given: see agents.DescribeLaunch before recording
// them.
func (p *Process) Launched() (argv, env []string) { return p.argv, p.env }

// Pid is the id of the process started, the program's reaper, which is
// also the process group id.
func (p *Process) Pid() int { return p.pgid }

// Wait blocks until the process has exited and all its output has been
// read and handed on. It may be called many times.
func (p *Process) Wait() Result {
	<-p.done
	return p.res
}

// Done is closed when Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill ends the program and every process it started, including those
// that left its process group or session: the reaper stops and kills all
// its descendants, then exits; Wait returns once they are all gone. It
// returns nil when the process has already ended.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	select {
	case <-p.exited:
		return nil // the reaper has ended everything already
	default:
		p.killed = true
	}
	p.reaper.kill()
	go func() { // lives at most reaperKillGrace, or until the reaper exits
		t := time.NewTimer(reaperKillGrace)
		defer t.Stop()
		select {
		case <-t.C:
			// A reaper that does not end is broken: end its group at least.
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		case <-p.exited:
		}
	}()
	return nil
}

// Terminate asks the process group to end with SIGTERM, giving programs a
// chance to clean up, and kills everything (Kill) if it is still running
// after grace.
func (p *Process) Terminate(grace time.Duration) error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	go func() { // lives at most grace, or until the process ends
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			_ = p.Kill()
		case <-p.exited:
		}
	}()
	return nil
}

// killLeftovers kills what the leader left running in its group, which
// holds the output open, without counting as a kill of the process.
func (p *Process) killLeftovers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	}
}

// signal sends sig to the program's process group (the reaper ignores it).
func (p *Process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	select {
	case <-p.exited:
		// The leader is gone already: this is not what ended it.
	default:
		p.killed = true
	}
	// Signal the group even after the leader exited: children it left
	// behind keep the group (and so its id) alive until they are gone.
	err := syscall.Kill(-p.pgid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", p.pgid, err)
	}
	return nil
}

// Stdin is the write end of the program's stdin, for StartPipe with
// PipeOptions.Stdin; nil otherwise. It is closed when the process has
// ended; closing it earlier tells the program that no more input comes.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Input writes to the process's terminal as if typed. Processes started
// with StartPipe have no terminal and return agents.ErrNoInput.
func (p *Process) Input(b []byte) error {
	if p.master == nil {
		return agents.ErrNoInput
	}
	select {
	case <-p.exited:
		return errors.New("the process has ended")
	default:
	}
	if _, err := p.master.Write(b); err != nil {
		return fmt.Errorf("write to terminal: %w", err)
	}
	return nil
}

// start launches cmd in a new session (so it is the leader of its own
// process group) and starts the goroutines that reap it, end it when ctx
// ends, and drain its output streams; finish runs when all is read.
func (p *Process) start(ctx context.Context, streams []*drainer, finish func(res *Result)) error {
	r, err := wrapReaper(p.cmd)
	if err != nil {
		return err
	}
	err = p.cmd.Start()
	r.started()
	if err != nil {
		r.kill()
		r.status.Close()
		return err
	}
	p.reaper = r
	p.pgid = p.cmd.Process.Pid
	p.exited = make(chan struct{})
	p.done = make(chan struct{})

	var wg sync.WaitGroup
	for _, s := range streams {
		s.exited, s.killGroup = p.exited, p.killLeftovers
		wg.Add(1)
		go func() { // ends at EOF/EIO, bounded by the drain timeout after exit
			defer wg.Done()
			s.run()
		}()
	}
	go func() { // ends when the process exits
		select {
		case <-ctx.Done():
			_ = p.Kill()
		case <-p.exited:
		}
	}()
	go func() { // ends when the process exits and its output is drained
		werr := p.cmd.Wait()
		ws, reported := p.reaper.agentStatus()
		close(p.exited)
		for _, s := range streams {
			s.startDrain()
		}
		wg.Wait()

		p.mu.Lock()
		if reported {
			p.res = resultOfStatus(ws, p.killed)
		} else {
			p.res = resultOf(p.cmd.ProcessState, werr, p.killed)
		}
		p.ended = true
		p.mu.Unlock()
		if finish != nil {
			finish(&p.res)
		}
		close(p.done)
	}()
	return nil
}

func resultOf(ps *os.ProcessState, werr error, killed bool) Result {
	if ps == nil {
		return Result{ExitCode: -1, Killed: killed, Err: fmt.Errorf("wait: %w", werr)}
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return resultOfStatus(ws, killed)
}

// resultOfStatus describes the program's end from its wait status, as the
// reaper reported it.
func resultOfStatus(ws syscall.WaitStatus, killed bool) Result {
	r := Result{ExitCode: -1, Killed: killed}
	switch {
	case ws.Signaled():
		r.Signal = ws.Signal()
		if killed {
			r.Err = fmt.Errorf("%w (signal %s)", ErrKilled, r.Signal)
		} else {
			r.Err = fmt.Errorf("killed by signal %s", r.Signal)
		}
	default:
		r.ExitCode = ws.ExitStatus()
		switch {
		case killed && r.ExitCode != 0:
			r.Err = fmt.Errorf("%w (exit status %d)", ErrKilled, r.ExitCode)
		case r.ExitCode != 0:
			r.Err = fmt.Errorf("exit status %d", r.ExitCode)
		}
	}
	return r
}

// drainer reads one output stream of the process until it ends. The stream
// ends (EOF on a pipe, EIO on a PTY master) only when every process holding
// its other end has closed it, which a leftover background child may never
// do; so once the leader has exited, a read that waits longer than the drain
// timeout kills the process group, and a second one gives up.
type drainer struct {
	f      *os.File
	drain  time.Duration
	handle func([]byte) // called with each chunk read, from this goroutine
	atEnd  func()       // called once when the stream ended
	exited <-chan struct{}
	// killGroup ends what is left of the process group after its leader
	// exited.
	killGroup func()
}

func (d *drainer) startDrain() {
	// Wake a read that is blocked right now; later reads set their own.
	_ = d.f.SetReadDeadline(time.Now().Add(d.drain))
}

func (d *drainer) run() {
	defer d.f.Close()
	if d.atEnd != nil {
		defer d.atEnd()
	}
	buf := make([]byte, 32*1024)
	escalated := false
	for {
		select {
		case <-d.exited:
			_ = d.f.SetReadDeadline(time.Now().Add(d.drain))
		default:
		}
		n, err := d.f.Read(buf)
		if n > 0 {
			d.handle(buf[:n])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !escalated {
			// Something the process left behind still holds the stream:
			// end the group so the stream closes.
			escalated = true
			d.killGroup()
			continue
		}
		// EOF, EIO (the PTY's last slave closed) or a second timeout.
		// A program may close its terminal and still run (a shell closes
		// its descriptors before its exit handlers). Closing the PTY
		// master now would hang up the terminal and kill it with SIGHUP,
		// so the master stays open until the process has exited.
		<-d.exited
		return
	}
}
