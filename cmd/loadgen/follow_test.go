package main

import (
	"fmt"
	"testing"
	"time"
)

// TestLineReaderJoinsStampsCutBetweenEvents: a stamp cut between two
// events is one line, measured once when its end arrives; reading each
// event alone took the digits before the cut for a stamp of 1970.
func TestLineReaderJoinsStampsCutBetweenEvents(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	stamp := start.Add(time.Second)
	line := fmt.Sprintf("t0=%d xxxx\r\n", stamp.UnixNano())
	lr := lineReader{start: start}
	for cut := 1; cut < len(line); cut++ {
		lr.feed([]byte(line[:cut]), stamp.Add(time.Millisecond))
		lr.feed([]byte(line[cut:]), stamp.Add(2*time.Millisecond))
	}
	if lr.bad != 0 || len(lr.lat) != len(line)-1 {
		t.Fatalf("%d latencies and %d bad lines, want %d and none", len(lr.lat), lr.bad, len(line)-1)
	}
	for _, d := range lr.lat {
		if d != 2*time.Millisecond {
			t.Fatalf("latency %v, want 2ms (from the stamp to the arrival of the line's end)", d)
		}
	}
}

// TestLineReaderCountsImpossibleStamps: a stamp from before the phase or
// after the line arrived is counted as bad, not measured; a line without
// a stamp (the shell's own output) is bad only when it is not blank.
func TestLineReaderCountsImpossibleStamps(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	now := start.Add(time.Second)
	lr := lineReader{start: start}
	lr.feed([]byte(fmt.Sprintf("t0=%d x\nt0=%d x\nt0=17 x\n\r\nsomething else\n", start.Add(-time.Second).UnixNano(), now.Add(time.Second).UnixNano())), now)
	if len(lr.lat) != 0 || lr.bad != 4 {
		t.Fatalf("%d latencies, %d bad; want none and 4", len(lr.lat), lr.bad)
	}
}
