// Package supervisor is the daemon's parent process: it holds the home lock,
// starts the worker process from its own executable, restarts it with
// backoff when it dies, and drains it on shutdown.
package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/memtrim"
)

// Options configure a supervisor.
type Options struct {
	Home home.Dir
	// Executable and WorkerArgs start one worker process.
	Executable string
	WorkerArgs []string
	// Log receives the supervisor's and the worker's output.
	Log io.Writer
	// Status receives the first worker's wire.Readiness line, then is
	// closed if it is an io.Closer. May be nil.
	Status io.Writer
	// MinBackoff and MaxBackoff bound the wait before a restart; they
	// default to 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// StableAfter is how long a worker must live for the backoff to reset;
	// default 30s.
	StableAfter time.Duration
	// DrainTimeout is how long a stopping worker may take before it is
	// killed; default 10s.
	DrainTimeout time.Duration
	// Launch, when set, is persisted in the home once the lock is held and
	// before the worker starts: of two starts racing, the one that wins the
	// lock runs its own settings, never the loser's.
	Launch *home.Launch
}

func (o *Options) defaults() {
	if o.MinBackoff == 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.StableAfter == 0 {
		o.StableAfter = 30 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Run supervises workers until ctx ends. It returns an error when the home is
// already supervised or the first worker cannot start.
func Run(ctx context.Context, opts Options) error {
	opts.defaults()
	s := &supervisor{opts: opts, status: opts.Status}
	defer s.closeStatus()
	lock, err := opts.Home.AcquireLock()
	if err != nil {
		if errors.Is(err, home.ErrLocked) {
			err = errors.New("a daemon is already running from this home")
		}
		s.relay(wire.Readiness{Error: err.Error(), Fatal: true})
		return err
	}
	defer lock.Release()
	if opts.Launch != nil {
		if err := opts.Home.WriteLaunch(*opts.Launch); err != nil {
			s.relay(wire.Readiness{Error: err.Error(), Fatal: true})
			return err
		}
	}
	pgid, _ := syscall.Getpgid(os.Getpid())
	if err := home.WritePID(opts.Home.SupervisorPIDFile(), home.PIDFile{PID: os.Getpid(), PGID: pgid, StartedAt: time.Now().UTC()}); err != nil {
		s.relay(wire.Readiness{Error: err.Error(), Fatal: true})
		return err
	}
	defer opts.Home.RemoveRuntimeFiles()
	return s.loop(ctx)
}

type supervisor struct {
	opts   Options
	status io.Writer
}

func (s *supervisor) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.Log, "%s supervisor: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (s *supervisor) loop(ctx context.Context) error {
	backoff := s.opts.MinBackoff
	for attempt := 1; ; attempt++ {
		began := time.Now()
		res := s.runWorker(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// The first worker's failure goes straight back to `start`: nothing
		// has worked yet, so retrying would only spin.
		if !res.everReady && attempt == 1 {
			if res.readiness.Error != "" {
				return errors.New(res.readiness.Error)
			}
			return fmt.Errorf("worker exited before it was ready: %s", res.exit)
		}
		if time.Since(began) >= s.opts.StableAfter {
			backoff = s.opts.MinBackoff
		}
		reason := res.exit
		if res.readiness.Error != "" {
			reason += " (" + res.readiness.Error + ")"
		}
		s.logf("worker pid %d exited: %s; restarting in %s", res.pid, reason, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
	}
}

type workerResult struct {
	pid       int
	exit      string // how it ended, for the log
	everReady bool
	readiness wire.Readiness
}

// runWorker starts one worker and waits for it to end, or drains it when ctx
// ends.
func (s *supervisor) runWorker(ctx context.Context) workerResult {
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return workerResult{exit: "status pipe: " + err.Error()}
	}
	defer statusR.Close()
	cmd := exec.Command(s.opts.Executable, s.opts.WorkerArgs...)
	cmd.Stdout = s.opts.Log
	cmd.Stderr = s.opts.Log
	cmd.ExtraFiles = []*os.File{statusW}
	cmd.Env = setEnv(os.Environ(), fmt.Sprintf("REEVE_SUPERVISOR_PID=%d", os.Getpid()), "REEVE_STATUS_FD=3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		statusW.Close()
		return workerResult{exit: "stdin pipe: " + err.Error()}
	}
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return workerResult{exit: "start: " + err.Error(), readiness: wire.Readiness{Error: "start worker: " + err.Error(), Fatal: true}}
	}
	statusW.Close()
	pid := cmd.Process.Pid
	if err := home.WritePID(s.opts.Home.WorkerPIDFile(), home.PIDFile{PID: pid, StartedAt: time.Now().UTC()}); err != nil {
		s.logf("record worker pid %d: %v (status will not show it)", pid, err)
	}

	readyc := make(chan wire.Readiness, 1)
	go func() {
		var r wire.Readiness
		line, err := bufio.NewReader(statusR).ReadBytes('\n')
		if err == nil {
			if jerr := json.Unmarshal(line, &r); jerr != nil {
				r = wire.Readiness{Error: "worker sent a malformed status line"}
			}
		}
		readyc <- r
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	res := workerResult{pid: pid}
	for {
		select {
		case r := <-readyc:
			res.readiness = r
			res.everReady = r.Ready
			s.relay(r)
			readyc = nil
			// The supervisor idles from here on; hand start-up garbage and
			// the code pages only start-up ran back to the kernel.
			memtrim.AfterStartup()
		case err := <-waited:
			res.exit = describeExit(err)
			if readyc != nil {
				// The worker may have written its reason just before exiting.
				select {
				case r := <-readyc:
					res.readiness = r
					res.everReady = r.Ready
					s.relay(r)
				case <-time.After(time.Second):
				}
			}
			if res.readiness.Error == "" && !res.everReady {
				s.relay(wire.Readiness{Error: "worker exited before it was ready: " + res.exit})
			}
			return res
		case <-ctx.Done():
			s.drain(cmd, stdin, waited)
			res.exit = "stopped"
			return res
		}
	}
}

// drain asks the worker to stop (EOF on its stdin, then SIGTERM) and kills it
// if it does not finish in time.
func (s *supervisor) drain(cmd *exec.Cmd, stdin io.Closer, waited <-chan error) {
	stdin.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waited:
		s.logf("worker pid %d stopped", cmd.Process.Pid)
	case <-time.After(s.opts.DrainTimeout):
		s.logf("worker pid %d did not stop within %s; killing it", cmd.Process.Pid, s.opts.DrainTimeout)
		cmd.Process.Kill()
		<-waited
	}
}

// relay passes the first readiness report on to whoever started the
// supervisor, then closes that channel: later restarts are logged instead.
func (s *supervisor) relay(r wire.Readiness) {
	if s.status == nil {
		return
	}
	b, _ := json.Marshal(r)
	s.status.Write(append(b, '\n'))
	s.closeStatus()
}

func (s *supervisor) closeStatus() {
	if c, ok := s.status.(io.Closer); ok {
		c.Close()
	}
	s.status = nil
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return "killed by signal " + ws.Signal().String()
			}
			if ws.ExitStatus() == wire.WorkerExitFatal {
				return fmt.Sprintf("exit status %d (start-up failure)", ws.ExitStatus())
			}
		}
	}
	return err.Error()
}

// setEnv returns env with each KEY=value of vars replacing any earlier value.
func setEnv(env []string, vars ...string) []string {
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		replaced := false
		for _, v := range vars {
			if strings.HasPrefix(v, key+"=") {
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}
