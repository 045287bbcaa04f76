package memtrim

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

func dropExecutablePages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return
	}
	for _, m := range cleanReadOnlyMappings(smaps, exe) {
		// MADV_DONTNEED: for a private file mapping, the next access maps
		// the file's page again.
		syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED)
	}
}

type mapping struct{ start, end uintptr }

// cleanReadOnlyMappings picks from /proc/self/smaps the mappings of exe that
// cannot be written and hold no private copy of a page (Anonymous: 0 kB):
// a page the dynamic loader relocated before making it read-only is such a
// copy, and dropping it would undo the relocation.
func cleanReadOnlyMappings(smaps []byte, exe string) []mapping {
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			// A mapping's header: start-end perms offset dev inode [path].
			cur = nil
			path := strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)")
			if path != exe || strings.Contains(f[1], "w") {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			cur = &mapping{start: uintptr(start), end: uintptr(end)}
			continue
		}
		if cur != nil && f[0] == "Anonymous:" && len(f) >= 2 {
			if f[1] == "0" {
				out = append(out, *cur)
			}
			cur = nil
		}
	}
	return out
}
