package agenttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// ClaudeEnv is the environment for an offline Claude Code run against an
// AnthropicServer: the current environment minus anything that could point
// Claude Code at a real account, plus the variables it needs. home becomes
// HOME, so its ~/.claude (settings, transcripts) stays inside the test.
func ClaudeEnv(baseURL, home string) []string {
	return append(cleanEnv(),
		"HOME="+home,
		"ANTHROPIC_BASE_URL="+baseURL,
		"ANTHROPIC_API_KEY=agenttest",
		// Without it Claude Code probes HEAD /api/hello and other
		// endpoints that have no business in a test.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		// As root, --dangerously-skip-permissions is refused unless Claude
		// Code believes it is sandboxed. Harmless when not root.
		"IS_SANDBOX=1",
	)
}

// CodexEnv is the environment for an offline Codex run with the CODEX_HOME
// that CodexHome wrote. home becomes HOME.
func CodexEnv(codexHome, home string) []string {
	return append(cleanEnv(),
		"HOME="+home,
		"CODEX_HOME="+codexHome,
		CodexAPIKeyEnv+"=agenttest",
	)
}

// GeminiEnv is the environment for an offline Gemini CLI run against a
// GeminiServer. home becomes HOME; its ~/.gemini/settings.json must select
// API-key auth (GeminiHome writes it): with a base URL alone Gemini CLI
// picks its "gateway" auth, which headless mode refuses.
func GeminiEnv(baseURL, home string) []string {
	return append(cleanEnv(),
		"HOME="+home,
		"GOOGLE_GEMINI_BASE_URL="+baseURL,
		"GEMINI_API_KEY=agenttest",
		// Telemetry, update checks and the like have no business here.
		"GEMINI_CLI_NO_RELAUNCH=true",
	)
}

// GeminiHome writes home/.gemini/settings.json for an offline run: API-key
// auth, no telemetry, no update checks; extra settings are merged in at the
// top level.
func GeminiHome(home string, extra map[string]any) error {
	settings := map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"general":   map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
	}
	for k, v := range extra {
		settings[k] = v
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(home, ".gemini")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600)
}

// cleanEnv drops variables that would let a developer's own agent setup
// (keys, config dirs, an enclosing agent session) leak into the run.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "ANTHROPIC_"), strings.HasPrefix(k, "CLAUDE"),
			strings.HasPrefix(k, "CODEX_"), strings.HasPrefix(k, "OPENAI_"),
			strings.HasPrefix(k, "GEMINI_"), strings.HasPrefix(k, "GOOGLE_"),
			k == "HOME", k == "IS_SANDBOX", k == "AI_AGENT":
			continue
		}
		out = append(out, kv)
	}
	return out
}
