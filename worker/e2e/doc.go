// Package e2e holds the team worker's end-to-end tests: a real control
// plane (server/servertest), real daemons and real worker processes of
// the built binary, real git, and real agents (the shell agent, and
// Claude Code against a scripted model server). It has no code.
package e2e
