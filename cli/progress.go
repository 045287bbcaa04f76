package cli

import (
	"fmt"
	"time"
)

// A call that answers within progressDelay prints nothing more; one that
// takes longer says on stderr what it waits for, then again every
// progressEvery with the time waited, so that a slow answer (a long
// session's manifest, transcripts to scan, git at work on a big worktree)
// does not look like a hang. stderr carries only status, so the lines go
// there whether or not it is a terminal.
const (
	progressDelay = 2 * time.Second
	progressEvery = 10 * time.Second
)

// waitingFor starts the progress of a wait described by what ("reading
// the manifest of session X"); the returned stop ends it, and returns only
// once nothing more will be printed, so the command's own output never
// interleaves with a late progress line.
func (e *Env) waitingFor(what string) (stop func()) {
	delay, every := progressDelay, progressEvery
	if e.progressDelay > 0 {
		delay, every = e.progressDelay, e.progressDelay
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		}
		fmt.Fprintf(e.Err, "reeve: %s...\n", what)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(e.Err, "reeve: still %s (%s so far)\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
