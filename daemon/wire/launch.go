package wire

import "time"

// Session-update kinds that make a session's receipt: how each turn's agent
// was launched, and the project policy in force.
const (
	KindLaunch = "launch" // Launch
	KindPolicy = "policy" // PolicyInForce
)

// Launch is how one turn's agent process was started, recorded before any
// event of the turn's agent (daemon/runtime holds those back until it is).
// Argv is the program's path and its arguments in order, with the prompt
// and context replaced by placeholders carrying their SHA-256 and
// secret-looking values masked; Env holds only the
// variables that configure the agent, secret ones masked (see
// agents.DescribeLaunch). Nothing in it is a secret, so it leaves the
// machine in every upload mode.
type Launch struct {
	Turn         int      `json:"turn"` // 1 for the session's first turn
	Agent        string   `json:"agent"`
	AgentVersion string   `json:"agent_version,omitempty"`
	Argv         []string `json:"argv"`
	Env          []string `json:"env,omitempty"`
	Dir          string   `json:"dir"`
}

// PolicyInForce records the project policy governing a session: at its
// start (Change "start"), and again whenever the daemon finds the policy
// file changed while the session lives (Change "changed", with the
// previous hash). Hash is "sha256:<hex>" of the policy file's bytes,
// "none" when the project has no policy file, or "unreadable" when the
// file cannot be read as a document (every decision denies then).
type PolicyInForce struct {
	Change   string    `json:"change"`
	Hash     string    `json:"hash"`
	Previous string    `json:"previous,omitempty"`
	File     string    `json:"file,omitempty"`
	At       time.Time `json:"at"`
}

// Policy changes.
const (
	PolicyStart   = "start"
	PolicyChanged = "changed"
	// PolicyNone is the hash of a project without a policy file.
	PolicyNone = "none"
)
