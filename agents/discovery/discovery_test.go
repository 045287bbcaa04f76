package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/claude"
	"reeve.dev/reeve/agents/codex"
)

func runTurn(t *testing.T, a agents.Adapter, turn agents.Turn) agents.TurnResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := a.StartTurn(ctx, turn, func(agents.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	if res.Err != nil || res.AgentSessionID == "" {
		t.Fatalf("%s turn: %+v", a.ID(), res)
	}
	return res
}

func pathGetenv(key, path string) func(string) string {
	return func(k string) string {
		if k == key {
			return path
		}
		return ""
	}
}

// Sessions the real agents ran (outside reeve's knowledge) are found from
// their own transcripts, with id, directory, title and times; junk next to
// them is skipped; Exclude drops what reeve already knows.
func TestScanFindsRealAgentSessions(t *testing.T) {
	claudeExe, codexExe := agenttest.Claude(t), agenttest.Codex(t)
	home := t.TempDir()
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{
		Dir:     filepath.Join(home, ".codex"),
		BaseURL: agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{{Text: "codex says hi"}}}).URL,
	})
	anth := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{{Text: "claude says hi"}}})

	claudeDir, codexDir := filepath.Join(t.TempDir(), "web app"), t.TempDir()
	os.MkdirAll(claudeDir, 0o755)
	before := time.Now().Add(-time.Second)
	cres := runTurn(t, claude.New(claude.Options{Getenv: pathGetenv(claude.EnvPath, claudeExe)}), agents.Turn{
		Prompt: "Fix the   login\nbug please", Dir: claudeDir, Env: agenttest.ClaudeEnv(anth.URL, home),
	})
	xres := runTurn(t, codex.New(codex.Options{Getenv: pathGetenv(codex.EnvPath, codexExe)}), agents.Turn{
		Prompt: "Add a README", Dir: codexDir, Env: agenttest.CodexEnv(codexHome, home),
	})

	writeJunk(t, home, codexHome)

	got, err := Scan(context.Background(), Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("found %d sessions, want 2: %+v", len(got), got)
	}
	byAgent := map[string]Session{}
	for _, s := range got {
		byAgent[s.Agent] = s
	}
	check := func(s Session, agent, id, dir, title string) {
		t.Helper()
		if s.Agent != agent || s.ID != id || s.Title != title {
			t.Errorf("%s session %+v, want id %s title %q", agent, s, id, title)
		}
		if real, _ := filepath.EvalSymlinks(dir); s.Dir != dir && s.Dir != real {
			t.Errorf("%s session dir %q, want %q", agent, s.Dir, dir)
		}
		if s.StartedAt.Before(before) || s.StartedAt.After(time.Now()) || s.UpdatedAt.Before(s.StartedAt.Add(-time.Second)) {
			t.Errorf("%s session times %v .. %v", agent, s.StartedAt, s.UpdatedAt)
		}
		if _, err := os.Stat(s.Path); err != nil || !strings.HasSuffix(s.Path, ".jsonl") {
			t.Errorf("%s session path %q: %v", agent, s.Path, err)
		}
	}
	check(byAgent[AgentClaude], AgentClaude, cres.AgentSessionID, claudeDir, "Fix the login bug please")
	check(byAgent[AgentCodex], AgentCodex, xres.AgentSessionID, codexDir, "Add a README")
	if !strings.HasPrefix(byAgent[AgentClaude].Path, filepath.Join(home, ".claude", "projects")) {
		t.Errorf("claude transcript at %s", byAgent[AgentClaude].Path)
	}
	if !strings.HasPrefix(byAgent[AgentCodex].Path, filepath.Join(codexHome, "sessions")) {
		t.Errorf("codex transcript at %s", byAgent[AgentCodex].Path)
	}
	if !got[0].UpdatedAt.After(got[1].UpdatedAt) && !got[0].UpdatedAt.Equal(got[1].UpdatedAt) {
		t.Errorf("not newest first: %v, %v", got[0].UpdatedAt, got[1].UpdatedAt)
	}

	// Exclude drops sessions reeve already knows.
	got, _ = Scan(context.Background(), Options{Home: home, Exclude: func(agent, id string) bool {
		return agent == AgentClaude && id == cres.AgentSessionID
	}})
	if len(got) != 1 || got[0].Agent != AgentCodex {
		t.Fatalf("with Exclude: %+v", got)
	}
	// An explicit CodexHome and ClaudeDir win over Home.
	got, _ = Scan(context.Background(), Options{Home: t.TempDir(), CodexHome: codexHome})
	if len(got) != 1 || got[0].Agent != AgentCodex {
		t.Fatalf("with CodexHome only: %+v", got)
	}
	got, _ = Scan(context.Background(), Options{Home: t.TempDir(), ClaudeDir: filepath.Join(home, ".claude")})
	if len(got) != 1 || got[0].Agent != AgentClaude {
		t.Fatalf("with ClaudeDir only: %+v", got)
	}
}

// writeJunk puts files next to the real transcripts that Scan must skip.
func writeJunk(t *testing.T, home, codexHome string) {
	t.Helper()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	projects := filepath.Join(home, ".claude", "projects", "-junk")
	id := "0e1a61f5-80b9-4154-8924-aac30b41ec85"
	write(filepath.Join(projects, id+".jsonl"), "not json\n{\"sessionId\": \"torn")
	write(filepath.Join(projects, "empty.jsonl"), "")
	// A line too long to read is not read; the file yields nothing.
	write(filepath.Join(projects, "11111111-2222-3333-4444-555555555555.jsonl"), `{"sessionId":"11111111-2222-3333-4444-555555555555","x":"`+strings.Repeat("a", 3<<20)+"\"}\n")
	// A sidechain (subagent) transcript is not a session.
	write(filepath.Join(projects, "agent-1.jsonl"), `{"type":"user","isSidechain":true,"sessionId":"`+id+`","cwd":"/x"}`+"\n")
	// A file whose name is not the session id it holds.
	write(filepath.Join(projects, "other.jsonl"), `{"type":"user","sessionId":"`+id+`","cwd":"/x"}`+"\n")
	write(filepath.Join(projects, "dir.jsonl", "x"), "")

	day := filepath.Join(codexHome, "sessions", "2026", "01", "02")
	tid := "01a1fc83-b56c-77a2-b6e8-99fbe4b5a158"
	write(filepath.Join(day, "rollout-2026-01-02T00-00-00-"+tid+".jsonl"), `{"type":"event_msg","payload":{}}`+"\n")
	write(filepath.Join(day, "rollout-2026-01-02T00-00-01-"+tid+".jsonl"), `{"timestamp":"2026-01-02T00:00:01Z","type":"session_meta","payload":{"id":"`+tid+`","cwd":"/w"`) // torn first line
	write(filepath.Join(day, "rollout-2026-01-02T00-00-02-bad.jsonl"), "\x00\x01\x02garbage\n")
	write(filepath.Join(codexHome, "sessions", "notes.txt"), "hello")
}

// Formats as older and newer versions write them, from synthetic files:
// the title comes from the first typed prompt, never injected context.
func TestReadTitles(t *testing.T) {
	dir := t.TempDir()
	cl := filepath.Join(dir, "s1.jsonl")
	os.WriteFile(cl, []byte(strings.Join([]string{
		`{"type":"summary","summary":"old"}`,
		`{"type":"user","sessionId":"s1","cwd":"/p","timestamp":"2025-01-01T10:00:00Z","isMeta":true,"message":{"role":"user","content":"<command-name>/init</command-name>"}}`,
		`{"type":"user","sessionId":"s1","cwd":"/p","timestamp":"2025-01-01T10:00:01Z","message":{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"` + strings.Repeat("long ", 40) + `"}]}}`,
	}, "\n")+"\n"), 0o644)
	s, ok := readClaude(cl)
	if !ok || s.ID != "s1" || s.Dir != "/p" || !s.StartedAt.Equal(time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("claude %+v %v", s, ok)
	}
	if !strings.HasPrefix(s.Title, "long long") || !strings.HasSuffix(s.Title, "…") || len([]rune(s.Title)) != maxTitle {
		t.Fatalf("claude title %q", s.Title)
	}

	cx := filepath.Join(dir, "rollout-2025-01-01T10-00-00-t1.jsonl")
	os.WriteFile(cx, []byte(strings.Join([]string{
		`{"timestamp":"2025-01-01T10:00:00.5Z","type":"session_meta","payload":{"id":"t1","timestamp":"2025-01-01T10:00:00Z","cwd":"/q"}}`,
		`{"timestamp":"2025-01-01T10:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]}}`,
		`{"timestamp":"2025-01-01T10:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"typed prompt"}]}}`,
		`{"timestamp":"2025-01-01T10:00:00Z","type":"event_msg","payload":{"type":"user_message","message":"typed prompt (event)","kind":"plain"}}`,
	}, "\n")+"\n"), 0o644)
	s, ok = readCodex(cx)
	if !ok || s.ID != "t1" || s.Dir != "/q" || s.Title != "typed prompt (event)" || !s.StartedAt.Equal(time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("codex %+v %v", s, ok)
	}
}

func TestScanEmptyAndCancelled(t *testing.T) {
	got, err := Scan(context.Background(), Options{Home: t.TempDir()})
	if err != nil || len(got) != 0 {
		t.Fatalf("empty home: %v, %v", got, err)
	}
	home := t.TempDir()
	p := filepath.Join(home, ".claude", "projects", "-p", "s.jsonl")
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte(`{"sessionId":"s","cwd":"/p"}`+"\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Scan(ctx, Options{Home: home}); err == nil {
		t.Fatal("cancelled scan succeeded")
	}
}
