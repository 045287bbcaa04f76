package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
)

// The load of `loadgen follow`, and why it costs the machine next to
// nothing beside the daemon.
//
// Each session is a shell agent that writes the name of its terminal into
// a FIFO this process made for it (`tty > FIFO`) and then waits, reading
// the FIFO, for the end of the phase. This process, the hub, opens every
// session's terminal (the PTY's slave side, which the daemon's worker reads
// from the master side) and, on one ticker at the rate, writes a stamped
// line into each: "t0=<unix ns> xxxx...". So a line costs one write(2) in
// one process; a program per session printing its own lines (an earlier
// loadgen) cost each session a Go runtime waking 200 times a second, and 51
// of them took most of the 2 cores the daemon was meant to have.
//
// What stays real: the sessions are the real binary's, under real PTYs,
// the load is out of the daemon's process, each stamp is taken just before
// its line is written, and the follower is a real protocol client.
//
// The hub never blocks on a session: the terminal is opened non-blocking,
// and when its buffer is full (the worker does not read fast enough) the
// rest of the line waits for the next tick, and the session's lines of the
// ticks meanwhile are counted as refused rather than written.

// lineSession is one session of a phase as the hub sees it.
type lineSession struct {
	id      string
	fifo    string
	tty     int    // the terminal's slave side, non-blocking; -1 when closed
	pending []byte // the unwritten rest of a line the terminal did not take
	base    int64  // the log's last seq before the phase wrote anything
	written int    // lines begun
	refused int    // lines not begun because the terminal was full
}

// daemonUnderTest is one binary's scratch daemon and what a phase needs of
// it.
type daemonUnderTest struct {
	label string
	sd    *scratchDaemon
	cl    *controlclient.Client
	dirID string
	pid   int // the worker's
}

type phaseOptions struct {
	rate    int
	seconds float64
	size    int
}

type phase struct {
	name      string
	lat       []time.Duration
	badStamps int // lines whose stamp could not be a time of this phase
	lines     int // lines the followed session's hub wrote
	written   int // lines written to every session
	refused   int
	wanted    int // lines a second wanted, over every session
	events    int64
	cpu       time.Duration // the worker's, from the first write to the last session's end
	cpuWrite  time.Duration // the worker's while the hub wrote
	cpuSelf   time.Duration // this process's (the hub and the follower) while the hub wrote
	writing   time.Duration // how long the hub wrote
	completed int           // sessions that ended completed
	sessions  int
}

func follow(args []string) error {
	fs := flag.NewFlagSet("follow", flag.ExitOnError)
	reeves := fs.String("reeve", "reeve", "the reeve binary; several, comma-separated, alternate phase by phase")
	writersList := fs.String("writers", "50", "sessions writing beside the followed one; several, comma-separated, run in turn")
	rate := fs.Int("rate", 200, "lines a second per session")
	seconds := fs.Float64("seconds", 10, "how long each phase writes")
	size := fs.Int("size", 200, "bytes of padding a line")
	rounds := fs.Int("rounds", 1, "how many times every phase runs, interleaved")
	fs.Parse(args)
	if *rate < 1 || *seconds <= 0 || *size < 0 || *rounds < 1 {
		return errors.New("follow: -rate and -seconds must be positive, -size and -rounds not negative")
	}
	var writers []int
	for _, w := range strings.Split(*writersList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 {
			return fmt.Errorf("follow: -writers %q: want counts like 10,25,50", *writersList)
		}
		writers = append(writers, n)
	}
	ctx := context.Background()
	var duts []*daemonUnderTest
	defer func() {
		for _, d := range duts {
			d.sd.close()
		}
	}()
	for _, bin := range strings.Split(*reeves, ",") {
		sd, err := startScratchDaemon(bin)
		if err != nil {
			return err
		}
		d := &daemonUnderTest{label: bin, sd: sd}
		duts = append(duts, d)
		if d.cl, d.dirID, err = sd.client(ctx); err != nil {
			return err
		}
		if d.pid, err = workerPID(bin, sd); err != nil {
			return err
		}
	}
	o := phaseOptions{rate: *rate, seconds: *seconds, size: *size}
	seq := 0
	for r := 0; r < *rounds; r++ {
		for _, n := range writers {
			for _, d := range duts {
				for _, w := range []int{0, n} {
					name := "baseline"
					if w > 0 {
						name = fmt.Sprintf("loaded-%d", w)
					}
					if len(duts) > 1 {
						name = d.label + " " + name
					}
					seq++
					p, err := runPhase(ctx, d, o, w, seq)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					p.name = name
					report(p)
				}
			}
		}
	}
	return nil
}

// workerPID reads the daemon worker's pid from `reeve status --json`.
func workerPID(reeve string, sd *scratchDaemon) (int, error) {
	cmd := exec.Command(reeve, "status", "--json")
	cmd.Env = append(os.Environ(), "REEVE_HOME="+string(sd.dir))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("reeve status: %w", err)
	}
	var st struct {
		Lifecycle struct {
			WorkerPID int `json:"worker_pid"`
		} `json:"lifecycle"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Lifecycle.WorkerPID == 0 {
		return 0, fmt.Errorf("reeve status: no worker pid in %s", out)
	}
	return st.Lifecycle.WorkerPID, nil
}

// cpuOf is a process's user and system time, from /proc.
func cpuOf(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+2:]))
	// Fields after the command: state is [0], utime [11], stime [12].
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

// selfCPU is this process's user and system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phaseTimeout bounds each wait of a phase on the daemon or an agent.
const phaseTimeout = 2 * time.Minute

// runPhase launches writers+1 sessions, follows the first, writes the
// lines, ends the sessions and reads the figures.
func runPhase(ctx context.Context, d *daemonUnderTest, o phaseOptions, writers, seq int) (phase, error) {
	p := phase{sessions: writers + 1}
	conn, err := controlclient.DialHome(ctx, d.sd.dir, controlclient.ConnOptions{RequestTimeout: 60 * time.Second})
	if err != nil {
		return p, err
	}
	defer conn.Close()
	fifos := filepath.Join(d.sd.tmp, fmt.Sprintf("fifos-%d", seq))
	if err := os.MkdirAll(fifos, 0o700); err != nil {
		return p, err
	}
	defer os.RemoveAll(fifos)
	ss := make([]*lineSession, writers+1)
	for i := range ss {
		s := &lineSession{fifo: filepath.Join(fifos, strconv.Itoa(i)), tty: -1}
		if err := syscall.Mkfifo(s.fifo, 0o600); err != nil {
			return p, fmt.Errorf("mkfifo: %w", err)
		}
		ss[i] = s
	}
	defer func() {
		for _, s := range ss {
			s.closeTTY()
		}
	}()
	launch := func(s *lineSession) error {
		si, err := conn.Launch(ctx, wire.LaunchRequest{Directory: d.dirID, Agent: "shell",
			Prompt: fmt.Sprintf("tty > '%s' && read x < '%s'", s.fifo, s.fifo)})
		s.id = si.ID
		return err
	}
	if err := launch(ss[0]); err != nil {
		return p, err
	}
	sub, err := conn.Subscribe(ctx, ss[0].id, 0)
	if err != nil {
		return p, err
	}
	for _, s := range ss[1:] {
		if err := launch(s); err != nil {
			return p, err
		}
	}
	for _, s := range ss {
		if err := s.openTTY(); err != nil {
			return p, fmt.Errorf("session %s: %w", s.id, err)
		}
		// The agent now waits in `read`: what its log holds is the
		// launch's own events.
		si, err := d.cl.Session(ctx, s.id)
		if err != nil {
			return p, err
		}
		s.base = si.LastSeq
	}

	cpu0, err := cpuOf(d.pid)
	if err != nil {
		return p, err
	}
	self0 := selfCPU()
	start := time.Now()
	received := make(chan []time.Duration, 1)
	var bad int
	go func() { // ends when the followed session ends or the connection does
		received <- latencies(sub, start, &bad)
	}()
	p.written, p.refused = writeLines(ss, o)
	p.writing = time.Since(start)
	cpuW, err := cpuOf(d.pid)
	if err != nil {
		return p, err
	}
	p.cpuWrite = cpuW - cpu0
	p.cpuSelf = selfCPU() - self0
	p.lines = ss[0].written
	p.wanted = len(ss) * o.rate
	for _, s := range ss {
		s.closeTTY() // before the agent ends: an open slave holds the PTY
		if err := s.release(); err != nil {
			return p, fmt.Errorf("session %s: %w", s.id, err)
		}
	}
	select {
	case p.lat = <-received:
	case <-time.After(phaseTimeout):
		return p, errors.New("the followed session did not end")
	}
	p.badStamps = bad
	if sub.Ended() == nil {
		return p, fmt.Errorf("the follower stopped: %v", sub.Err())
	}
	deadline := time.Now().Add(phaseTimeout)
	for _, s := range ss {
		for {
			si, err := d.cl.Session(ctx, s.id)
			if err != nil {
				return p, err
			}
			if !slices.Contains([]string{"starting", "running", "waiting-permission"}, si.Status) {
				p.events += si.LastSeq - s.base
				if si.Status == "completed" {
					p.completed++
				}
				break
			}
			if time.Now().After(deadline) {
				return p, errors.New("the writers did not end")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cpu1, err := cpuOf(d.pid)
	if err != nil {
		return p, err
	}
	p.cpu = cpu1 - cpu0
	return p, nil
}

// openTTY reads the terminal's name the agent writes into its FIFO and
// opens the terminal for writing.
func (s *lineSession) openTTY() error {
	name, err := withTimeout(func() ([]byte, error) { return os.ReadFile(s.fifo) })
	if err != nil {
		return fmt.Errorf("read the agent's terminal name: %w", err)
	}
	path := strings.TrimSpace(string(name))
	if !strings.HasPrefix(path, "/dev/") {
		return fmt.Errorf("the agent wrote %q, not a terminal", name)
	}
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NOCTTY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	s.tty = fd
	return nil
}

func (s *lineSession) closeTTY() {
	if s.tty >= 0 {
		syscall.Close(s.tty)
		s.tty = -1
	}
}

// release ends the agent's wait, and so the session.
func (s *lineSession) release() error {
	_, err := withTimeout(func() ([]byte, error) {
		f, err := os.OpenFile(s.fifo, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		_, err = f.Write([]byte("end\n"))
		return nil, err
	})
	if err != nil {
		return fmt.Errorf("end the agent's wait: %w", err)
	}
	return nil
}

// withTimeout runs a FIFO open, which blocks until the agent opens the
// other end, for at most phaseTimeout (an agent that never came leaves the
// goroutine behind; the run fails anyway).
func withTimeout(f func() ([]byte, error)) ([]byte, error) {
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := f()
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-time.After(phaseTimeout):
		return nil, errors.New("the agent did not open its FIFO")
	}
}

// writeLines writes a stamped line into every session's terminal at each
// tick, for the phase's time. The order of the sessions turns from tick to
// tick, so the followed one is not always written first. A hub that wakes
// late (the machine is busy) writes the rounds it missed at once, up to
// maxCatchUp of them, so the load stays the rate asked for; rounds missed
// beyond that count as neither written nor refused (the report shows
// written against wanted).
func writeLines(ss []*lineSession, o phaseOptions) (written, refused int) {
	const maxCatchUp = 10
	pad := strings.Repeat("x", o.size)
	period := time.Second / time.Duration(o.rate)
	tick := time.NewTicker(period)
	defer tick.Stop()
	begin := time.Now()
	rounds := int(o.seconds * float64(o.rate))
	buf := make([]byte, 0, o.size+32)
	for k := 0; k < rounds; {
		now := <-tick.C
		due := min(int(now.Sub(begin)/period), rounds)
		if due-k > maxCatchUp {
			k = due - maxCatchUp
		}
		for ; k < due; k++ {
			w, r := writeRound(ss, k, pad, &buf)
			written += w
			refused += r
		}
	}
	return written, refused
}

// writeRound writes one stamped line into every session's terminal, the
// k-th round.
func writeRound(ss []*lineSession, k int, pad string, buf *[]byte) (written, refused int) {
	for j := range ss {
		s := ss[(j+k)%len(ss)]
		if len(s.pending) > 0 {
			n, err := syscall.Write(s.tty, s.pending)
			if n > 0 {
				s.pending = s.pending[n:]
			}
			if len(s.pending) > 0 || (err != nil && err != syscall.EAGAIN) {
				s.refused++
				refused++
				continue
			}
		}
		b := append((*buf)[:0], "t0="...)
		b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
		b = append(b, ' ')
		b = append(b, pad...)
		b = append(b, '\n')
		*buf = b
		n, err := syscall.Write(s.tty, b)
		if err == syscall.EAGAIN {
			s.refused++
			refused++
			continue
		}
		if n < 0 {
			n = 0
		}
		s.written++
		written++
		if n < len(b) {
			s.pending = append(s.pending[:0], b[n:]...)
		}
	}
	return written, refused
}

// latencies reads the followed session's terminal output until it ends
// and returns each line's latency, from its stamp to the arrival of its
// end. The output is a byte stream cut into events anywhere, a stamp
// included, so lines are put back together before they are read: reading
// stamps from each event alone once took the digits before a cut for a
// whole stamp, a time in 1970 and a latency of 498699 hours. A stamp that
// still cannot be a time of this phase is counted in bad, not measured.
func latencies(sub *wireclient.Subscription, start time.Time, bad *int) []time.Duration {
	lr := lineReader{start: start}
	for u := range sub.Updates() {
		if u.Kind != wire.KindTerminalOutput {
			continue
		}
		now := time.Now()
		var d wire.TerminalOutput
		if json.Unmarshal(u.Data, &d) != nil {
			continue
		}
		text, err := d.Bytes()
		if err != nil {
			continue
		}
		lr.feed(text, now)
	}
	*bad = lr.bad
	return lr.lat
}

// lineReader puts the followed terminal's lines back together across
// events and measures each stamped one when its end arrives.
type lineReader struct {
	start time.Time // the phase's first write: no stamp is older
	line  []byte    // the line so far
	lat   []time.Duration
	bad   int
}

// feed takes one event's text, which arrived at now.
func (lr *lineReader) feed(text []byte, now time.Time) {
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			lr.line = append(lr.line, text...)
			return
		}
		lr.line = append(lr.line, text[:i]...)
		text = text[i+1:]
		if t, ok := stampOf(lr.line); ok && !t.Before(lr.start) && !t.After(now) {
			lr.lat = append(lr.lat, now.Sub(t))
		} else if ok || len(bytes.TrimSpace(lr.line)) > 0 {
			lr.bad++
		}
		lr.line = lr.line[:0]
	}
}

// stampOf reads the "t0=<unix ns>" a line starts with.
func stampOf(line []byte) (time.Time, bool) {
	i := bytes.Index(line, []byte("t0="))
	if i < 0 {
		return time.Time{}, false
	}
	digits := line[i+3:]
	if j := bytes.IndexByte(digits, ' '); j >= 0 {
		digits = digits[:j]
	}
	ns, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func report(p phase) {
	if len(p.lat) == 0 {
		fmt.Printf("%-24s no latencies (bad stamps %d)\n", p.name, p.badStamps)
		return
	}
	slices.Sort(p.lat)
	q := func(f float64) time.Duration { return p.lat[min(len(p.lat)-1, int(f*float64(len(p.lat))))] }
	secs := p.writing.Seconds()
	fmt.Printf("%-24s followed %d/%d lines p50=%v p99=%v p99.9=%v max=%v bad=%d | all: %.0f lines/s written of %d wanted, %d refused; events %.0f/s; worker %v cpu, %.1f µs/event, %.1f µs/line (while writing: %.0f%% of a core, %.1f µs/line; loadgen %.0f%%) | %d/%d completed\n",
		p.name, len(p.lat), p.lines, q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(0.999).Round(time.Microsecond),
		p.lat[len(p.lat)-1].Round(time.Microsecond), p.badStamps,
		float64(p.written)/secs, p.wanted, p.refused, float64(p.events)/secs, p.cpu,
		float64(p.cpu.Microseconds())/float64(max(p.events, 1)), float64(p.cpu.Microseconds())/float64(max(p.written, 1)),
		100*p.cpuWrite.Seconds()/secs, float64(p.cpuWrite.Microseconds())/float64(max(p.written, 1)), 100*p.cpuSelf.Seconds()/secs,
		p.completed, p.sessions)
}
