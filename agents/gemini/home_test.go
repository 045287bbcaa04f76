package gemini

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
)

// A governed session's Gemini home keeps the user's settings and sign-in
// and adds reeve's fail-closed hooks; unreadable user settings refuse the
// turn rather than run it without them.
func TestGovernedHome(t *testing.T) {
	user := t.TempDir()
	os.MkdirAll(filepath.Join(user, ".gemini"), 0o700)
	os.WriteFile(filepath.Join(user, ".gemini", "settings.json"), []byte(`{"ui":{"theme":"x"},"hooks":{"BeforeTool":[{"matcher":"*","hooks":[{"type":"command","command":"allow-all"}]}],"SessionStart":[{"hooks":[{"type":"command","command":"mine"}]}]}}`), 0o600)
	os.WriteFile(filepath.Join(user, ".gemini", "oauth_creds.json"), []byte(`{"token":"t"}`), 0o600)
	state := t.TempDir()
	turn := agents.Turn{StateDir: state, Hook: &agents.Hook{Timeout: 40 * time.Second, Command: func(ev string) string { return "reeve hook " + ev }}}
	a := New(Options{})
	home, err := a.governedHome(turn, []string{"HOME=" + user})
	if err != nil {
		t.Fatal(err)
	}
	if home != filepath.Join(state, "gemini-home") {
		t.Fatalf("home %s", home)
	}
	var s struct {
		UI    map[string]any `json:"ui"`
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Command string `json:"command"`
				Timeout int    `json:"timeout"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	b, _ := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	bt := s.Hooks["BeforeTool"]
	if s.UI["theme"] != "x" || len(bt) != 1 || bt[0].Matcher != "*" || len(bt[0].Hooks) != 1 ||
		!strings.Contains(bt[0].Hooks[0].Command, "reeve hook BeforeTool") || !strings.Contains(bt[0].Hooks[0].Command, `"decision":"deny"`) ||
		bt[0].Hooks[0].Timeout != 41000 || len(s.Hooks["SessionStart"]) != 1 {
		t.Fatalf("settings %s", b)
	}
	if c, err := os.ReadFile(filepath.Join(home, ".gemini", "oauth_creds.json")); err != nil || string(c) != `{"token":"t"}` {
		t.Fatalf("credentials not linked: %q %v", c, err)
	}
	// Again (the next turn): idempotent.
	if _, err := a.governedHome(turn, []string{"HOME=" + user}); err != nil {
		t.Fatal(err)
	}
	// A relocated user home is where the user's settings are read.
	moved := t.TempDir()
	os.MkdirAll(filepath.Join(moved, ".gemini"), 0o700)
	os.WriteFile(filepath.Join(moved, ".gemini", "settings.json"), []byte(`{"model":{"name":"m"}}`), 0o600)
	turn.StateDir = t.TempDir()
	home, err = a.governedHome(turn, []string{"HOME=" + user, "GEMINI_CLI_HOME=" + moved})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".gemini", "settings.json")); !strings.Contains(string(b), `"name": "m"`) {
		t.Fatalf("relocated settings not used: %s", b)
	}
	// Broken user settings: no turn.
	os.WriteFile(filepath.Join(user, ".gemini", "settings.json"), []byte(`{broken`), 0o600)
	turn.StateDir = t.TempDir()
	if _, err := a.governedHome(turn, []string{"HOME=" + user}); err == nil {
		t.Fatal("broken user settings were ignored")
	}
	if _, err := a.governedHome(agents.Turn{Hook: turn.Hook}, nil); err == nil {
		t.Fatal("a governed turn without a state directory started")
	}
}

func TestArgs(t *testing.T) {
	got := strings.Join(Args(agents.Turn{Prompt: "-x", Model: "m", Resume: "r", Context: "ctx"}), " ")
	want := "-o stream-json --skip-trust --approval-mode yolo -m m --resume r --prompt=<context>\nctx\n</context>\n\n-x"
	if got != want {
		t.Fatalf("args %q, want %q", got, want)
	}
}
