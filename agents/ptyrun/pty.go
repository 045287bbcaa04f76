package ptyrun

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Options configures a process run under a pseudo-terminal.
type Options struct {
	// Path is the executable; Args follow the program name.
	Path string
	Args []string
	// Dir is the working directory; "" means the current one.
	Dir string
	// Env is the environment; nil means this process's. TERM is added when
	// missing, since programs on a terminal expect one.
	Env []string
	// Rows and Cols size the terminal; zero means DefaultRows x DefaultCols.
	Rows, Cols uint16
	// Emit receives the output as terminal-output events, in order.
	Emit agents.Emit
	// Raw, when set, receives every byte read from the terminal, unchanged,
	// before it is emitted (for evidence files).
	Raw io.Writer
	// DrainTimeout: see DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// Start runs the program under a new PTY as the leader of a new session
// with the PTY as its controlling terminal. The process is killed when ctx
// ends.
func Start(ctx context.Context, o Options) (*Process, error) {
	if o.Path == "" {
		return nil, fmt.Errorf("start under a pty: no executable")
	}
	ws := &pty.Winsize{Rows: o.Rows, Cols: o.Cols}
	if ws.Rows == 0 {
		ws.Rows = DefaultRows
	}
	if ws.Cols == 0 {
		ws.Cols = DefaultCols
	}
	master, tty, err := openPTY(ws)
	if err != nil {
		return nil, err
	}
	defer tty.Close() // the child has its own copies; ours would hide EIO

	cmd := exec.Command(o.Path, o.Args...)
	cmd.Dir = o.Dir
	cmd.Env = withTerm(o.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Pdeathsig: an agent must not outlive a daemon worker that was killed
	// outright; nothing would record or stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}

	emit := o.Emit
	if emit == nil {
		emit = func(agents.Event) {}
	}
	chunker := &utf8Chunker{emit: emit}
	d := &drainer{
		f:     master,
		drain: orDefault(o.DrainTimeout, DefaultDrainTimeout),
		handle: func(b []byte) {
			if o.Raw != nil {
				_, _ = o.Raw.Write(b)
			}
			chunker.write(b)
		},
		atEnd: chunker.flush,
	}
	// The drainer owns the master and closes it when done; Input writes to
	// it until then.
	p := &Process{cmd: cmd, master: master, argv: append([]string{o.Path}, o.Args...), env: envOf(cmd.Env)}
	if err := p.start(ctx, []*drainer{d}, nil); err != nil {
		master.Close()
		return nil, fmt.Errorf("start %s: %w", o.Path, err)
	}
	return p, nil
}

// openPTY opens a PTY pair and returns a master that Go's poller manages,
// so that read deadlines work and closing it interrupts a read. pty.Open's
// master is in blocking mode (its ioctls go through File.Fd), so we dup the
// descriptor, make it non-blocking and wrap that.
func openPTY(ws *pty.Winsize) (master, tty *os.File, err error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, ws); err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	fd, err := syscall.Dup(int(ptmx.Fd()))
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("dup pty master: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		tty.Close()
		return nil, nil, fmt.Errorf("pty master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

func withTerm(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "TERM=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], "TERM=xterm-256color")
}

// envOf is the environment a command with env runs with.
func envOf(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return env
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// utf8Chunker turns reads into terminal-output events. A multi-byte
// character cut by a read boundary is held back until the next read, so
// Text never splits one; a chunk that is not valid UTF-8 goes whole into
// Base64, so clients can always rebuild the exact bytes.
type utf8Chunker struct {
	emit    agents.Emit
	pending []byte // an incomplete character at the end of the last read
}

func (c *utf8Chunker) write(b []byte) {
	data := b
	if len(c.pending) > 0 {
		data = append(c.pending, b...)
		c.pending = nil
	}
	if cut := incompleteTail(data); cut < len(data) {
		c.pending = append([]byte(nil), data[cut:]...)
		data = data[:cut]
	}
	c.send(data)
}

// flush emits a held-back tail at the end of the stream; it can only be
// invalid UTF-8 by then.
func (c *utf8Chunker) flush() {
	data := c.pending
	c.pending = nil
	c.send(data)
}

func (c *utf8Chunker) send(data []byte) {
	if len(data) == 0 {
		return
	}
	if utf8.Valid(data) {
		c.emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: string(data)}})
		return
	}
	c.emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Base64: base64.StdEncoding.EncodeToString(data)}})
}

// incompleteTail returns where a trailing, possibly complete-able
// multi-byte character starts, or len(b) when b does not end in one.
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
