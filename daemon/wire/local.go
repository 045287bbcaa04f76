// Package wire defines the daemon's formats, once: the frames of the
// control protocol (requests and their results, events, error codes, the
// kinds of session events and their data), spoken over the local /ws and
// over relayed channels, and the JSON bodies of the local HTTP API. It is
// a leaf package — it imports only the standard library — so that the
// daemon, the server's SDK, workers and tests share one definition;
// docs/protocol.md describes it for clients in other languages.
package wire

import "time"

// Health is the body of GET /health.
type Health struct {
	Status        string    `json:"status"` // "ok"
	Version       string    `json:"version"`
	DaemonID      string    `json:"daemon_id"`
	Profile       string    `json:"profile"`
	WorkerPID     int       `json:"worker_pid"`
	SupervisorPID int       `json:"supervisor_pid"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Sessions      int       `json:"sessions"` // sessions that are not yet ended
	Auth          bool      `json:"auth"`
	// Relay is the relay link and remote-control lock (profile relay).
	Relay *RemoteStatus `json:"relay,omitempty"`
	// Agents are the ids of the adapters the daemon loaded, in its order
	// (a team worker checks its --agents against them before it claims
	// work). Whether each one's program is installed is known only when a
	// session launches it.
	Agents []string `json:"agents,omitempty"`
}

// Directory is a registered directory.
type Directory struct {
	ID      string    `json:"id"`
	Path    string    `json:"path"`
	AddedAt time.Time `json:"added_at"`
}

// DirectoryList is the body of GET /api/directories.
type DirectoryList struct {
	Directories []Directory `json:"directories"`
}

// AddDirectoryRequest is the body of POST /api/directories.
type AddDirectoryRequest struct {
	Path string `json:"path"`
}

// AddDirectoryResponse answers POST /api/directories: 201 when the directory
// was registered now, 200 when it already was.
type AddDirectoryResponse struct {
	Directory Directory `json:"directory"`
	Created   bool      `json:"created"`
}

// ErrorBody is the body of every error answer of the local API.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine-readable code with a human message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of the local API.
const (
	CodeForbiddenHost   = "forbidden_host"
	CodeForbiddenOrigin = "forbidden_origin"
	CodeUnauthorized    = "unauthorized"
	CodeNotFound        = "not_found"
	CodeInvalid         = "invalid_request"
	CodeMethod          = "method_not_allowed"
	CodeInternal        = "internal"
	CodeDirectoryInUse  = "directory_in_use" // remove of a directory whose sessions are active
)

// Readiness is the one line a freshly started worker writes on its status
// pipe, relayed by the supervisor to `reeve start`: either where it listens,
// or why it could not start.
type Readiness struct {
	Ready   bool   `json:"ready"`
	Network string `json:"network,omitempty"`
	Address string `json:"address,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Error   string `json:"error,omitempty"`
	// Fatal marks an error that a restart cannot fix (bad listen address,
	// port in use); the supervisor gives up instead of retrying.
	Fatal bool `json:"fatal,omitempty"`
	// Reason is a machine-readable cause of Error, so that the command
	// that started the daemon can say what to change in its own terms.
	Reason string `json:"reason,omitempty"`
}

// Readiness reasons.
const (
	// ReadinessAddressInUse: the listen address is taken by another
	// process.
	ReadinessAddressInUse = "address_in_use"
)

// WorkerExitFatal is the worker process's exit code for a start-up failure
// that a restart cannot fix; the supervisor gives up instead of retrying.
const WorkerExitFatal = 20
