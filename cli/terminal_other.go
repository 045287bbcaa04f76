//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

import (
	"errors"
	"os"
)

type termios struct{}

var errNoTerminal = errors.New("terminal control is not supported on this platform")

func getTermios(*os.File) (*termios, error) { return nil, errNoTerminal }
func setTermios(*os.File, *termios) error   { return errNoTerminal }
func setCbreak(*termios)                    {}
