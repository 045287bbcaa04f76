// Package shell is the built-in agent that needs no coding agent at all: it
// runs each prompt as a command line with the user's shell, under a PTY, in
// the session's directory. It is a preset of the custom adapter and the
// default agent when neither Claude Code nor Codex is installed.
package shell

import (
	"os"
	"os/exec"

	"reeve.dev/reeve/agents/custom"
)

// ID is the shell adapter's id.
const ID = "shell"

// ResumeToken is what every shell turn returns as its resume token: a
// further prompt runs another command in the same directory.
const ResumeToken = "shell"

// FallbackShell is used when $SHELL is unset.
const FallbackShell = "/bin/sh"

// Options configures the shell adapter.
type Options struct {
	// Getenv reads $SHELL; default os.Getenv.
	Getenv func(string) string
	// LookPath finds the shell when $SHELL is a bare name; default
	// exec.LookPath.
	LookPath func(string) (string, error)
}

// New returns the shell adapter: `$SHELL -c <prompt>` (or /bin/sh).
func New(o Options) *custom.Adapter {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	sh := o.Getenv("SHELL")
	if sh == "" {
		sh = FallbackShell
	}
	return custom.New(custom.Options{
		ID:        ID,
		Command:   sh,
		Args:      []string{"-c"},
		PromptArg: true,
		Resume:    ResumeToken,
		LookPath:  o.LookPath,
	})
}
