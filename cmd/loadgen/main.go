// Command loadgen measures the daemon from outside it, through the real
// binary: the load comes from agent sessions the daemon runs, and the
// measuring client is this process, so neither shares the daemon's process
// (and scheduler) as an in-process benchmark's load does.
//
//	loadgen emit -rate 200 -seconds 10
//	    the agent side: prints lines stamped with the time they were
//	    written ("t0=<unix ns>"), rate a second, then exits.
//	loadgen follow -reeve ./reeve -writers 50 -rate 200 -seconds 10 -rounds 2
//	    starts a daemon in a temporary home, and per round runs a baseline
//	    (the followed session alone) and then the load (writers other
//	    sessions beside it), each session a shell agent running `loadgen
//	    emit`. A follower of the one session reports each line's latency
//	    from its stamp to its arrival over the control protocol (p50, p99,
//	    p99.9), and the daemon worker's CPU time per event recorded.
//
//	loadgen amplify -reeve ./reeve -mb 64
//	    the event log's bytes on disk against the terminal text they
//	    hold, through the real binary (amplify.go).
//
// Figures of both phases come from the same run, interleaved, so the
// machine's state at the time is in both.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "emit":
		err = emit(os.Args[2:])
	case "follow":
		err = follow(os.Args[2:])
	case "amplify":
		err = amplify(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: loadgen emit|follow|amplify [flags] (see the package documentation)")
	os.Exit(2)
}

func emit(args []string) error {
	fs := flag.NewFlagSet("emit", flag.ExitOnError)
	rate := fs.Int("rate", 200, "lines a second")
	seconds := fs.Float64("seconds", 10, "how long")
	size := fs.Int("size", 200, "bytes of padding a line")
	at := fs.Int64("at", 0, "start writing at this time (unix ns), so that sessions launched one by one write together")
	fs.Parse(args)
	if *at > 0 {
		time.Sleep(time.Until(time.Unix(0, *at)))
	}
	pad := strings.Repeat("x", *size)
	tick := time.NewTicker(time.Second / time.Duration(max(*rate, 1)))
	defer tick.Stop()
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	buf := make([]byte, 0, *size+64)
	for now := range tick.C {
		if now.After(end) {
			return nil
		}
		buf = append(buf[:0], "t0="...)
		buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
		buf = append(buf, ' ')
		buf = append(buf, pad...)
		buf = append(buf, '\n')
		if _, err := os.Stdout.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

type phase struct {
	name       string
	lat        []time.Duration
	events     int64
	cpu, wall  time.Duration
	sessionsOK int
}

func follow(args []string) error {
	fs := flag.NewFlagSet("follow", flag.ExitOnError)
	reeve := fs.String("reeve", "reeve", "the reeve binary")
	writers := fs.Int("writers", 50, "sessions writing beside the followed one")
	rate := fs.Int("rate", 200, "lines a second per session")
	seconds := fs.Float64("seconds", 10, "how long each phase writes")
	rounds := fs.Int("rounds", 1, "baseline and loaded phases, interleaved")
	fs.Parse(args)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sd, err := startScratchDaemon(*reeve)
	if err != nil {
		return err
	}
	defer sd.close()
	dir := sd.dir
	ctx := context.Background()
	cl, dirID, err := sd.client(ctx)
	if err != nil {
		return err
	}
	pid, err := workerPID(*reeve, dir)
	if err != nil {
		return err
	}
	prompt := func(at time.Time) string {
		return fmt.Sprintf("%s emit -rate %d -seconds %g -at %d", self, *rate, *seconds, at.UnixNano())
	}
	for r := 0; r < *rounds; r++ {
		for _, n := range []int{0, *writers} {
			name := "baseline"
			if n > 0 {
				name = fmt.Sprintf("loaded-%d", n)
			}
			p, err := runPhase(ctx, dir, cl, dirID, prompt, n, pid)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			p.name = name
			report(p)
		}
	}
	return nil
}

// workerPID reads the daemon worker's pid from `reeve status --json`.
func workerPID(reeve string, dir home.Dir) (int, error) {
	cmd := exec.Command(reeve, "status", "--json")
	cmd.Env = append(os.Environ(), "REEVE_HOME="+string(dir))
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
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+2:]))
	// Fields after the command: state is [0], utime [11], stime [12].
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

var stamp = regexp.MustCompile(`t0=(\d+)`)

func runPhase(ctx context.Context, dir home.Dir, cl *controlclient.Client, dirID string, prompt func(time.Time) string, writers, pid int) (phase, error) {
	conn, err := controlclient.DialHome(ctx, dir, controlclient.ConnOptions{RequestTimeout: 60 * time.Second})
	if err != nil {
		return phase{}, err
	}
	defer conn.Close()
	// Every session starts writing at once, after all are launched (a
	// launch takes time and CPU of its own, which is not what this
	// measures): 0.4 s for each launch, and 2 s.
	at := time.Now().Add(2*time.Second + time.Duration(writers)*400*time.Millisecond)
	followed, err := conn.Launch(ctx, wire.LaunchRequest{Directory: dirID, Agent: "shell", Prompt: prompt(at)})
	if err != nil {
		return phase{}, err
	}
	sub, err := conn.Subscribe(ctx, followed.ID, 0)
	if err != nil {
		return phase{}, err
	}
	ids := []string{followed.ID}
	for range writers {
		si, err := conn.Launch(ctx, wire.LaunchRequest{Directory: dirID, Agent: "shell", Prompt: prompt(at)})
		if err != nil {
			return phase{}, err
		}
		ids = append(ids, si.ID)
	}
	// The programs write nothing before at, so what the logs hold now is
	// the launches' own events. Reading it takes a while on a loaded
	// machine, which is why it happens before at, not after.
	base := map[string]int64{}
	for _, id := range ids {
		si, err := cl.Session(ctx, id)
		if err != nil {
			return phase{}, err
		}
		base[id] = si.LastSeq
	}
	if time.Now().After(at) {
		return phase{}, errors.New("the launches took longer than the time allowed for them")
	}
	time.Sleep(time.Until(at))
	cpu0, err := cpuOf(pid)
	if err != nil {
		return phase{}, err
	}
	t0 := at
	var p phase
	for u := range sub.Updates() {
		if u.Kind != wire.KindTerminalOutput {
			continue
		}
		now := time.Now()
		var d wire.TerminalOutput
		if json.Unmarshal(u.Data, &d) != nil {
			continue
		}
		for _, m := range stamp.FindAllStringSubmatch(d.Text, -1) {
			ns, _ := strconv.ParseInt(m[1], 10, 64)
			p.lat = append(p.lat, now.Sub(time.Unix(0, ns)))
		}
	}
	if e := sub.Ended(); e == nil {
		return p, fmt.Errorf("the follower stopped: %v", sub.Err())
	}
	// The writers end about when the followed session does.
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		for {
			si, err := cl.Session(ctx, id)
			if err != nil {
				return p, err
			}
			if !slices.Contains([]string{"starting", "running", "waiting-permission"}, si.Status) {
				p.events += si.LastSeq - base[id]
				if si.Status == "completed" {
					p.sessionsOK++
				}
				break
			}
			if time.Now().After(deadline) {
				return p, errors.New("the writers did not end")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	p.wall = time.Since(t0)
	cpu1, err := cpuOf(pid)
	if err != nil {
		return p, err
	}
	p.cpu = cpu1 - cpu0
	return p, nil
}

func report(p phase) {
	if len(p.lat) == 0 {
		fmt.Printf("%-10s no latencies\n", p.name)
		return
	}
	slices.Sort(p.lat)
	q := func(f float64) time.Duration { return p.lat[min(len(p.lat)-1, int(f*float64(len(p.lat))))] }
	fmt.Printf("%-10s lines=%d p50=%v p99=%v p99.9=%v max=%v | events=%d (%.0f/s) worker-cpu=%v (%.1f µs/event) sessions-completed=%d\n",
		p.name, len(p.lat), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(0.999).Round(time.Microsecond),
		p.lat[len(p.lat)-1].Round(time.Microsecond), p.events, float64(p.events)/p.wall.Seconds(), p.cpu,
		float64(p.cpu.Microseconds())/float64(max(p.events, 1)), p.sessionsOK)
}
