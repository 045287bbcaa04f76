package cli

import (
	"io"
	"os"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := getTermios(f)
	return err == nil
}

// inTerminal reports whether a command's input is a terminal: whether a
// person can answer a prompt.
func inTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTerminal(f)
}

// cbreak makes the terminal deliver each key as it is pressed, without
// echo, while keeping signals (Ctrl-C) and output processing; restore
// undoes it.
func cbreak(f *os.File) (restore func(), err error) {
	old, err := getTermios(f)
	if err != nil {
		return nil, err
	}
	t := *old
	setCbreak(&t)
	if err := setTermios(f, &t); err != nil {
		return nil, err
	}
	return func() { setTermios(f, old) }, nil
}
