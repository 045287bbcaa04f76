package agenttest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// CodexHomeOptions configures a CODEX_HOME for an offline Codex run.
type CodexHomeOptions struct {
	// Dir is the folder to use as CODEX_HOME. Default: a new temp folder.
	Dir string
	// BaseURL is the provider base URL including /v1 (OpenAIServer.URL).
	BaseURL string
	// Model is the model name Codex sends. Default DefaultCodexModel.
	Model string
	// EnvKey names the variable Codex reads the API key from. Default
	// CodexAPIKeyEnv; the run must set it to any non-empty value.
	EnvKey string
	// Extra is TOML placed verbatim after the top-level keys, so it may
	// hold both top-level keys (approval_policy = ...) and tables
	// ([[hooks.PreToolUse]] ...).
	Extra string
}

// Defaults for CodexHome.
const (
	DefaultCodexModel = "gpt-5.5"
	CodexAPIKeyEnv    = "AGENTTEST_OPENAI_API_KEY"
	// codexProvider is the provider id in config.toml. It must not be one
	// of Codex's built-in ids ("openai", "ollama", ...), which would make
	// Codex use its own endpoints and login flow.
	codexProvider = "agenttest"
)

// CodexHome writes a CODEX_HOME whose config.toml sends every model call to
// the scripted server, and returns its path. The run needs
// CODEX_HOME=<path> and CodexAPIKeyEnv (or EnvKey) set in its environment.
func CodexHome(t testing.TB, o CodexHomeOptions) string {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if err := WriteCodexHome(o); err != nil {
		t.Fatalf("write codex home: %v", err)
	}
	return o.Dir
}

// WriteCodexHome writes o.Dir/config.toml; see CodexHome.
func WriteCodexHome(o CodexHomeOptions) error {
	if o.Dir == "" || o.BaseURL == "" {
		return errors.New("write codex home: Dir and BaseURL are required")
	}
	if o.Model == "" {
		o.Model = DefaultCodexModel
	}
	if o.EnvKey == "" {
		o.EnvKey = CodexAPIKeyEnv
	}
	// Extra goes right after the top-level keys: a bare key placed after
	// a [table] header would belong to that table, and its own tables end
	// where ours begin.
	extra := ""
	if o.Extra != "" {
		extra = "\n" + o.Extra + "\n"
	}
	q := strconv.Quote // TOML basic strings accept Go's quoting for ASCII
	cfg := fmt.Sprintf(`# Written by reeve agents/agenttest: an offline Codex against a scripted server.
model = %s
model_provider = %s
# No update checks, analytics or feedback uploads: there is no network.
check_for_update_on_startup = false
%s
[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.%s]
name = "agenttest scripted server"
base_url = %s
wire_api = "responses"
env_key = %s
# The scripted server speaks plain HTTP SSE only.
supports_websockets = false
# A script mistake should fail fast, not after minutes of retries.
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 60000
`, q(o.Model), q(codexProvider), extra, codexProvider, q(o.BaseURL), q(o.EnvKey))
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("write codex home: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write codex home: %w", err)
	}
	return nil
}
