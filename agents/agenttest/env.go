package agenttest

import (
	"os"
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

// cleanEnv drops variables that would let a developer's own agent setup
// (keys, config dirs, an enclosing agent session) leak into the run.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "ANTHROPIC_"), strings.HasPrefix(k, "CLAUDE"),
			strings.HasPrefix(k, "CODEX_"), strings.HasPrefix(k, "OPENAI_"),
			k == "HOME", k == "IS_SANDBOX", k == "AI_AGENT":
			continue
		}
		out = append(out, kv)
	}
	return out
}
