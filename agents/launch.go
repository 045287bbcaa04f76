package agents

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"

	"reeve.dev/reeve/internal/redact"
)

// Launch is the command line a turn's agent process was started with, as
// it may be shown and recorded: the program's path and every argument in
// order, exactly as executed, except that
//   - the turn's prompt and context, when they are arguments, are replaced
//     by a placeholder carrying their SHA-256 (the prompt is recorded as
//     an event of its own; the context can be large and private);
//   - secret-looking values are masked: an argument that looks like a key
//     or token, the value of a flag named like one (--api-key X,
//     --token=X), and so on (internal/redact);
//   - of the environment, only the variables that configure agents and
//     reeve are kept (ANTHROPIC_*, OPENAI_*, CODEX_*, GEMINI_*, GOOGLE_*,
//     CLAUDE_*, REEVE_*, IS_SANDBOX, proxies), sorted by name, with the
//     values of secret-named ones (…_API_KEY, …_TOKEN) masked. The rest
//     is the daemon's own environment, which is no part of the turn.
//
// The masking happens here, on the daemon, so no later step (a sync in
// "full" mode, an export) can let an API key out.
type Launch struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
}

// Launcher is a Process that can say how it was launched. Every adapter's
// process is one; the daemon records it with the turn.
type Launcher interface {
	Launch() Launch
}

// launchEnvPrefixes are the environment variables that configure an agent
// or reeve, which a receipt of the launch keeps.
var launchEnvPrefixes = []string{"ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_", "CLAUDE_", "REEVE_"}

// launchEnvNames are single variables a receipt keeps.
var launchEnvNames = map[string]bool{"IS_SANDBOX": true, "HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true}

// DescribeLaunch makes the Launch of a process started with argv (the
// program's path, then its arguments) and env for turn t.
func DescribeLaunch(argv, env []string, t Turn) Launch {
	out := Launch{Argv: make([]string, len(argv))}
	secretNext := false
	for i, a := range argv {
		sub, isText := substituteText(a, t)
		switch {
		case i > 0 && isText:
			out.Argv[i] = sub
		case secretNext:
			out.Argv[i] = redact.Mask
		default:
			out.Argv[i] = maskArg(a)
		}
		secretNext = i > 0 && isSecretFlag(a)
	}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !keptEnv(name) {
			continue
		}
		if redact.SecretKey(name) {
			value = redact.Mask
		} else {
			value = redact.String(value)
		}
		out.Env = append(out.Env, name+"="+value)
	}
	sort.Strings(out.Env)
	return out
}

// substituteText replaces the turn's prompt and context in an argument
// that carries them, alone or as a flag's value (--prompt=...), with
// placeholders.
func substituteText(a string, t Turn) (string, bool) {
	if sub, ok := textPlaceholder(a, t); ok {
		return sub, true
	}
	if strings.HasPrefix(a, "-") {
		if name, value, ok := strings.Cut(a, "="); ok {
			if sub, ok := textPlaceholder(value, t); ok {
				return name + "=" + sub, true
			}
		}
	}
	return a, false
}

// textPlaceholder is the placeholder of v when it is the prompt, or holds
// the context (followed by the prompt, as agents without a system prompt
// of their own are given both).
func textPlaceholder(v string, t Turn) (string, bool) {
	switch {
	case t.Context != "" && strings.Contains(v, t.Context):
		out := placeholder("context", t.Context)
		if t.Prompt != "" && strings.HasSuffix(v, t.Prompt) {
			out += " " + placeholder("prompt", t.Prompt)
		}
		return out, true
	case t.Prompt != "" && v == t.Prompt:
		return placeholder("prompt", t.Prompt), true
	}
	return "", false
}

func placeholder(what, s string) string {
	sum := sha256.Sum256([]byte(s))
	return "[" + what + " sha256:" + hex.EncodeToString(sum[:]) + "]"
}

// isSecretFlag reports whether a is a flag whose value follows it and is
// named like a secret (--api-key, --token, -p is not one).
func isSecretFlag(a string) bool {
	if !strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
		return false
	}
	return redact.SecretKey(strings.TrimLeft(a, "-"))
}

// maskArg masks a secret-shaped argument, and the value of a
// --secret-named=value flag.
func maskArg(a string) string {
	if strings.HasPrefix(a, "-") {
		if name, _, ok := strings.Cut(a, "="); ok && redact.SecretKey(strings.TrimLeft(name, "-")) {
			return name + "=" + redact.Mask
		}
	}
	return redact.String(a)
}

func keptEnv(name string) bool {
	if launchEnvNames[name] {
		return true
	}
	for _, p := range launchEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
