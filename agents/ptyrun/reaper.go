package ptyrun

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every agent runs under a reaper: a copy of this executable (re-executed
// through /proc/self/exe, which stays valid when the file is moved or
// replaced) that makes itself a child subreaper, starts the agent as its
// child, and ends every process below it before it exits. A process that
// left the agent's process group or session (setsid, a double fork) is
// still its descendant, and an orphan is re-parented to the reaper rather
// than to init, so nothing a turn started can outlive it: not on Kill, not
// when the agent exits on its own, and not when the daemon worker dies
// (the reaper sees its control pipe close).
//
// Why a process per turn rather than the worker as the subreaper: orphans
// re-parented to the worker would have to be reaped by a wait on any child,
// which steals the exit statuses that os/exec waits for, and could not be
// told apart by turn.

// reaperEnv marks a process started as a reaper; the agent never sees it.
const reaperEnv = "_REEVE_PTYRUN_REAPER"

// The reaper's inherited descriptors: it reads the control pipe (whose
// end, closed or not, is the worker's "kill everything") and writes the
// agent's wait status to the status pipe before it exits.
const (
	reaperCtlFD    = 3
	reaperStatusFD = 4
)

// reaperKillGrace is how long Kill waits for the reaper to end everything
// before it kills the reaper's process group itself.
const reaperKillGrace = 10 * time.Second

func init() {
	if os.Getenv(reaperEnv) != "1" {
		return
	}
	os.Exit(reaperMain(os.Args[1:]))
}

// reaper is the worker's side of a process started under a reaper.
type reaper struct {
	ctl    *os.File // write end of the control pipe; closing it kills
	status *os.File // read end of the status pipe
	child  []*os.File
}

// wrapReaper rewrites cmd so that it starts a reaper that runs the original
// program. The program is resolved here, so a missing one fails at Start
// as it would without the reaper.
func wrapReaper(cmd *exec.Cmd) (*reaper, error) {
	if len(cmd.ExtraFiles) > 0 {
		// The reaper hands the agent its standard streams only.
		return nil, fmt.Errorf("extra files cannot be passed through the reaper")
	}
	path, err := exec.LookPath(cmd.Path)
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("reaper pipe: %w", err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("reaper pipe: %w", err)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	args := append([]string{"reeve-reaper", path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = "/proc/self/exe", args
	cmd.Env = append(withoutKey(env, reaperEnv), reaperEnv+"=1")
	cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	// The reaper must outlive nothing it started, so it is not killed by
	// the worker's death outright (that would orphan the agent's tree to
	// init); it sees the control pipe close instead.
	cmd.SysProcAttr.Pdeathsig = 0
	return &reaper{ctl: ctlW, status: stR, child: []*os.File{ctlR, stW}}, nil
}

// started closes the reaper's ends of the pipes in this process.
func (r *reaper) started() {
	for _, f := range r.child {
		f.Close()
	}
	r.child = nil
}

// kill asks the reaper to end every process below it. Idempotent.
func (r *reaper) kill() { r.ctl.Close() }

// agentStatus reads the agent's wait status once the reaper has exited;
// false when the reaper did not report one (it died, or could not start
// the agent).
func (r *reaper) agentStatus() (syscall.WaitStatus, bool) {
	defer r.status.Close()
	defer r.ctl.Close()
	b, err := io.ReadAll(io.LimitReader(r.status, 64))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, false
	}
	return syscall.WaitStatus(n), true
}

func withoutKey(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// reaperMain is the reaper process: argv is the agent's path and its
// arguments (argv[0] doubles as the agent's argv[0]).
func reaperMain(argv []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "reeve reaper: "+format+"\n", a...)
		return 127
	}
	if len(argv) == 0 {
		return fail("no program to run")
	}
	ctl := os.NewFile(reaperCtlFD, "reaper-control")
	status := os.NewFile(reaperStatusFD, "reaper-status")
	if ctl == nil || status == nil {
		return fail("started without its pipes")
	}
	syscall.CloseOnExec(reaperCtlFD)
	syscall.CloseOnExec(reaperStatusFD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("become a subreaper: %v", err)
	}
	// Signals meant for the agent reach the reaper too when they go to the
	// process group (Terminate, ^C typed on the terminal): catch and drop
	// them. Caught (not ignored) so the agent starts with default handlers.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()

	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   withoutKey(os.Environ(), reaperEnv),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		// Should the reaper itself be killed outright, the agent goes too.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail("%v", err)
	}
	agent := proc.Pid

	// Reap every child: the agent, and whatever is re-parented here.
	agentDone := make(chan syscall.WaitStatus, 1)
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case err == syscall.EINTR:
			case err != nil: // no children right now; orphans may still come
				time.Sleep(20 * time.Millisecond)
			case pid == agent:
				agentDone <- ws
			}
		}
	}()
	killReq := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, ctl) // ends at EOF: Kill, or the worker died
		close(killReq)
	}()

	var ws syscall.WaitStatus
	select {
	case ws = <-agentDone:
		killDescendants(os.Getpid())
	case <-killReq:
		killDescendants(os.Getpid())
		ws = <-agentDone
	}
	fmt.Fprintf(status, "%d\n", uint32(ws))
	status.Close()
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 1
}

// killDescendants ends every living process below pid, stopping each
// first so that none forks in between, until none is left. Children of a
// killed process come to pid (a subreaper), so a later round finds them.
func killDescendants(pid int) {
	for round := 1; ; round++ {
		procs := Descendants(pid)
		if len(procs) == 0 {
			return
		}
		for _, p := range procs {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		for _, p := range procs {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(time.Duration(min(round, 20)) * 5 * time.Millisecond)
	}
}

// Descendants lists the living (not zombie) processes below pid, from
// /proc. It is how the reaper finds what to end, and how tests check that
// nothing survived.
func Descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	living := map[int]bool{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(p)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], p)
		living[p] = state != 'Z' && state != 'X'
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if living[c] {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}

// procStat reads a process's parent and state from /proc/<pid>/stat. The
// command name may hold spaces and parentheses, so fields are counted from
// the last ')'.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return ppid, f[0][0], true
}
