package hookprog

import (
	"os"
	"syscall"
)

func identityOf(st os.FileInfo) (fileIdentity, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileIdentity{}, false
	}
	return fileIdentity{
		dev: uint64(s.Dev), ino: uint64(s.Ino), size: s.Size,
		mtime: s.Mtimespec.Nano(), ctime: s.Ctimespec.Nano(),
	}, true
}
