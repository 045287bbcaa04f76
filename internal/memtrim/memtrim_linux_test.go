package memtrim

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const sampleSmaps = `00400000-01188000 r-xp 00000000 fd:01 1234                               /opt/reeve/bin/reeve
Size:              13852 kB
Rss:                7840 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
01188000-01f03000 r--p 00d88000 fd:01 1234                               /opt/reeve/bin/reeve
Size:              14316 kB
Anonymous:             0 kB
01f03000-01fb4000 rw-p 01b03000 fd:01 1234                               /opt/reeve/bin/reeve
Size:                708 kB
Anonymous:           188 kB
02000000-02010000 r--p 01c00000 fd:01 1234                               /opt/reeve/bin/reeve
Size:                 64 kB
Anonymous:             4 kB
7f1aa4ece000-7f1aa4f4e000 rw-p 00000000 00:00 0 
Anonymous:           252 kB
7f1aeed10000-7f1aeed36000 r-xp 00000000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f1aeee00000-7f1aeee10000 r--p 00000000 fd:01 1234                       /opt/reeve/bin/reeve (deleted)
Anonymous:             0 kB
`

func TestCleanReadOnlyMappings(t *testing.T) {
	got := cleanReadOnlyMappings([]byte(sampleSmaps), "/opt/reeve/bin/reeve")
	want := []mapping{{0x400000, 0x1188000}, {0x1188000, 0x1f03000}, {0x7f1aeee00000, 0x7f1aeee10000}}
	if len(got) != len(want) {
		t.Fatalf("got %x, want %x (never the writable data, a relocated read-only page, another file or anonymous memory)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: got %x, want %x", i, got[i], want[i])
		}
	}
}

// TestAfterStartupDropsExecutablePages runs the real thing on the test
// binary: its resident executable pages fall, and the process goes on
// running code, collecting garbage and reading its read-only data.
func TestAfterStartupDropsExecutablePages(t *testing.T) {
	before := exeRSS(t)
	AfterStartup()
	after := exeRSS(t)
	if after >= before {
		t.Fatalf("resident pages of the executable: %d KiB before, %d KiB after", before, after)
	}
	t.Logf("resident pages of the executable: %d KiB before, %d KiB after", before, after)
	var sink []string
	for i := 0; i < 10000; i++ {
		sink = append(sink, strconv.Itoa(i))
	}
	runtime.GC()
	if sink[9999] != "9999" || strings.ToUpper("reeve") != "REEVE" {
		t.Fatal("the process misbehaves after its pages were dropped")
	}
}

func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") && len(f) >= 5 {
			in = len(f) >= 6 && f[5] == exe && !strings.Contains(f[1], "w")
			continue
		}
		if in && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			total += n
		}
	}
	if total == 0 {
		t.Fatal("no resident pages of the executable found")
	}
	return total
}
