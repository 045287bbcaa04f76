package cli

import (
	"errors"
	"fmt"
)

// Exit codes of the reeve binary. They are decided here and nowhere else;
// the README's exit-code table mirrors this list.
const (
	ExitOK         = 0  // success
	ExitFailure    = 1  // an unexpected failure (I/O, a crashed dependency)
	ExitUsage      = 2  // bad flags, arguments or input values
	ExitNotRunning = 3  // no daemon is running, or it cannot be reached
	ExitNotFound   = 4  // the named directory, session, request or record does not exist
	ExitConflict   = 5  // the operation conflicts with current state (already running, already decided)
	ExitDenied     = 6  // authentication or permission refused (401/403)
	ExitTimeout    = 7  // a wait ran out of time
	ExitInvalid    = 8  // a validated document (config, policy) has errors
	ExitUnhealthy  = 9  // the daemon process is alive but does not answer (status: unresponsive)
	ExitSessionBad = 10 // a waited-for session ended failed, killed or interrupted
	// ExitInterrupted follows the shell's convention for SIGINT (128+2):
	// the person stopped a wait with Ctrl-C (or SIGTERM); the session
	// keeps running.
	ExitInterrupted = 130
)

// ExitError carries the exit code a command wants, with the message to show.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// exitf builds an ExitError with a formatted message.
func exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// withExit attaches an exit code to err, keeping a code already attached.
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	return &ExitError{Code: code, Err: err}
}

// exitCode maps an error returned by a command to the process exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFailure
}

// errSilent marks a failure whose explanation was already printed, so Main
// sets the exit code without printing anything more.
type errSilent struct{ code int }

func (e errSilent) Error() string { return "" }

// silentExit ends a command with code and no further message.
func silentExit(code int) error { return &ExitError{Code: code, Err: errSilent{code}} }
