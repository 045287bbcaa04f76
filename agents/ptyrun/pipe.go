package ptyrun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxLine bounds one stdout line of a StartPipe process. Agents put
// whole tool outputs on one JSON line, so this is generous; a longer line
// is cut to this size (and so no longer parses).
const DefaultMaxLine = 64 << 20

// stderrTail is how much of standard error a Result keeps.
const stderrTail = 16 << 10

// PipeOptions configures a process whose stdout is read as lines.
type PipeOptions struct {
	// Path is the executable; Args follow the program name.
	Path string
	Args []string
	// Dir is the working directory; "" means the current one.
	Dir string
	// Env is the environment; nil means this process's.
	Env []string
	// Line receives each stdout line without its line ending, in order,
	// from one goroutine. The slice is only valid during the call.
	Line func(line []byte)
	// Raw, when set, receives every byte of stdout, unchanged, before the
	// lines are handed on (for evidence files).
	Raw io.Writer
	// MaxLine: see DefaultMaxLine.
	MaxLine int
	// DrainTimeout: see DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Stdin, when set, gives the program a pipe for stdin instead of
	// /dev/null; Process.Stdin writes to it (agents with a control
	// protocol on stdin).
	Stdin bool
}

// StartPipe runs the program with stdin on /dev/null, stdout read as lines
// and the tail of stderr kept for the Result, as the leader of its own
// process group. The process is killed when ctx ends.
func StartPipe(ctx context.Context, o PipeOptions) (*Process, error) {
	if o.Path == "" {
		return nil, fmt.Errorf("start: no executable")
	}
	// Our own pipes rather than Cmd.StdoutPipe: Cmd.Wait closes those as
	// soon as the process exits, which can cut off output not yet read.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	var inR, inW *os.File
	if o.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
	}
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Dir, cmd.Env = o.Dir, o.Env
	cmd.Stdout, cmd.Stderr = outW, errW
	if inR != nil {
		cmd.Stdin = inR
	}
	// Pdeathsig: an agent must not outlive a daemon worker that was killed
	// outright; nothing would record or stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	drain := orDefault(o.DrainTimeout, DefaultDrainTimeout)
	lines := &lineSplitter{line: o.Line, max: o.MaxLine}
	if lines.max <= 0 {
		lines.max = DefaultMaxLine
	}
	if lines.line == nil {
		lines.line = func([]byte) {}
	}
	stdout := &drainer{
		f:     outR,
		drain: drain,
		handle: func(b []byte) {
			if o.Raw != nil {
				_, _ = o.Raw.Write(b)
			}
			lines.write(b)
		},
		atEnd: lines.flush,
	}
	tail := &tailBuffer{max: stderrTail}
	stderr := &drainer{f: errR, drain: drain, handle: tail.write}

	p := &Process{cmd: cmd, stdin: inW, argv: append([]string{o.Path}, o.Args...), env: envOf(cmd.Env)}
	err = p.start(ctx, []*drainer{stdout, stderr}, func(r *Result) {
		r.Stderr = tail.String()
		if inW != nil {
			inW.Close()
		}
	})
	// The child has its own copies of the write ends; ours would keep the
	// pipes open forever.
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		return nil, fmt.Errorf("start %s: %w", o.Path, err)
	}
	return p, nil
}

// lineSplitter cuts a byte stream into lines, bounding each.
type lineSplitter struct {
	line    func([]byte)
	max     int
	buf     []byte
	discard bool // the current line passed max; drop the rest of it
}

func (s *lineSplitter) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if !s.discard {
			if room := s.max - len(s.buf); len(part) > room {
				part = part[:room]
				s.discard = true
			}
			s.buf = append(s.buf, part...)
		}
		if i < 0 {
			return
		}
		s.emit()
		b = b[i+1:]
	}
}

func (s *lineSplitter) emit() {
	line := bytes.TrimSuffix(s.buf, []byte("\r"))
	s.line(line)
	s.buf, s.discard = s.buf[:0], false
	if cap(s.buf) > 1<<20 {
		s.buf = nil // one huge line should not pin its buffer forever
	}
}

// flush hands on a last line that had no newline.
func (s *lineSplitter) flush() {
	if len(s.buf) > 0 {
		s.emit()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD")
}
