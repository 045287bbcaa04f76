// Command loadgen measures the daemon from outside it, through the real
// binary: the load comes from agent sessions the daemon runs, and the
// measuring client is this process, so neither shares the daemon's process
// (and scheduler) as an in-process benchmark's load does.
//
//	loadgen follow -reeve ./reeve -writers 10,25,50 -rate 200 -seconds 10 -rounds 2
//	    starts a daemon in a temporary home and, per round and per writer
//	    count, runs a baseline (the followed session alone) and then the
//	    load (writers other sessions beside it). A follower of the one
//	    session reports each line's latency from its stamp to its arrival
//	    over the control protocol (p50, p99, p99.9), the lines written and
//	    the events recorded a second against those wanted, and the daemon
//	    worker's CPU time per event (follow.go).
//
//	    -reeve takes several binaries, comma-separated (an old build beside
//	    a new one): each gets its own daemon, and their phases alternate,
//	    so every figure has its baseline and its rival from the same run.
//
//	loadgen amplify -reeve ./reeve -mb 64
//	    the event log's bytes on disk against the terminal text they
//	    hold, through the real binary (amplify.go).
//
// Figures of all phases come from the same run, interleaved, so the
// machine's state at the time is in each.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
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
	fmt.Fprintln(os.Stderr, "usage: loadgen follow|amplify [flags] (see the package documentation)")
	os.Exit(2)
}
