package agents_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"reeve.dev/reeve/agents"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// The recorded command line is the one executed, in order, with the
// prompt and context replaced by their digests and every secret masked:
// values of secret-named flags (both spellings), secret-shaped arguments
// and secret-named environment variables. Only the agents' configuration
// is kept of the environment.
func TestDescribeLaunchMasksSecretsAndPrompt(t *testing.T) {
	prompt := "fix the build; the key is sk-ant-api03-PROMPTSECRET0123456789"
	context := "<notes>vault context</notes>"
	argv := []string{"/usr/bin/agent", "-p", "--model", "sonnet", "--max-tokens", "4096",
		"--api-key", "plainvalue", "--token=abc123", "--header", "Authorization: Bearer ghp_0123456789abcdefghij0123",
		"--append-system-prompt", context, "<context>\n" + context + "\n</context>\n\n" + prompt, prompt, "--prompt=" + prompt}
	env := []string{"HOME=/home/dev", "PATH=/usr/bin", "AWS_SECRET_ACCESS_KEY=zzz",
		"ANTHROPIC_API_KEY=sk-ant-api03-ENVSECRET0123456789", "ANTHROPIC_BASE_URL=http://127.0.0.1:9/v1",
		"OPENAI_BASE_URL=https://user:pw@proxy.example/v1", "REEVE_SESSION=01ABC", "IS_SANDBOX=1", "GEMINI_API_KEY=agenttest"}
	l := agents.DescribeLaunch(argv, env, agents.Turn{Prompt: prompt, Context: context})
	want := []string{"/usr/bin/agent", "-p", "--model", "sonnet", "--max-tokens", "4096",
		"--api-key", "[redacted]", "--token=[redacted]", "--header", "Authorization: [redacted]",
		"--append-system-prompt", "[context sha256:" + sha(context) + "]",
		"[context sha256:" + sha(context) + "] [prompt sha256:" + sha(prompt) + "]", "[prompt sha256:" + sha(prompt) + "]",
		"--prompt=[prompt sha256:" + sha(prompt) + "]"}
	if strings.Join(l.Argv, "\n") != strings.Join(want, "\n") {
		t.Fatalf("argv\n%q\nwant\n%q", l.Argv, want)
	}
	wantEnv := []string{"ANTHROPIC_API_KEY=[redacted]", "ANTHROPIC_BASE_URL=http://127.0.0.1:9/v1", "GEMINI_API_KEY=[redacted]",
		"IS_SANDBOX=1", "OPENAI_BASE_URL=https://user:[redacted]@proxy.example/v1", "REEVE_SESSION=01ABC"}
	if strings.Join(l.Env, " ") != strings.Join(wantEnv, " ") {
		t.Fatalf("env %q\nwant %q", l.Env, wantEnv)
	}
	all, _ := json.Marshal(l)
	for _, secret := range []string{"PROMPTSECRET", "ENVSECRET", "plainvalue", "abc123", "ghp_", "zzz", "agenttest", "/home/dev", "vault context"} {
		if strings.Contains(string(all), secret) {
			t.Errorf("%q left in %s", secret, all)
		}
	}
	// The program path is never taken for the prompt, even when equal.
	if l := agents.DescribeLaunch([]string{"sh", "-c", "sh"}, nil, agents.Turn{Prompt: "sh"}); l.Argv[0] != "sh" || l.Argv[2] != "[prompt sha256:"+sha("sh")+"]" {
		t.Fatalf("argv %q", l.Argv)
	}
}
