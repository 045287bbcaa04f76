//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

func getTermios(f *os.File) (*unix.Termios, error) {
	return unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
}

func setTermios(f *os.File, t *unix.Termios) error {
	return unix.IoctlSetTermios(int(f.Fd()), ioctlSetTermios, t)
}

func setCbreak(t *unix.Termios) {
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
}
