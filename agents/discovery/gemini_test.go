package discovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/gemini"
)

// A session the real Gemini CLI ran, resumed once, is found once from its
// own chat file, with its id, directory, typed title and times; files that
// only look like chats are skipped.
func TestScanFindsGeminiSessions(t *testing.T) {
	exe := agenttest.Gemini(t)
	srv := agenttest.NewGeminiServer(t, agenttest.GeminiOptions{Turns: []agenttest.Turn{{Text: "gemini says hi"}, {Text: "again"}}})
	home := t.TempDir()
	if err := agenttest.GeminiHome(home, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "my project")
	os.MkdirAll(dir, 0o755)
	before := time.Now().Add(-time.Second)
	a := gemini.New(gemini.Options{Getenv: pathGetenv(gemini.EnvPath, exe)})
	env := agenttest.GeminiEnv(srv.URL, home)
	res := runTurn(t, a, agents.Turn{Prompt: "Tidy the   imports\nplease", Model: "gemini-2.5-pro", Dir: dir, Env: env})
	runTurn(t, a, agents.Turn{Prompt: "and the tests", Model: "gemini-2.5-pro", Dir: dir, Env: env, Resume: res.Resume})

	chats := filepath.Join(home, ".gemini", "tmp", "junk", "chats")
	os.MkdirAll(chats, 0o700)
	os.WriteFile(filepath.Join(home, ".gemini", "tmp", "junk", ".project_root"), []byte("/somewhere\n"), 0o600)
	os.WriteFile(filepath.Join(chats, "session-2026-01-01T00-00-deadbeef.jsonl"), []byte("not json\n"), 0o600)
	os.WriteFile(filepath.Join(chats, "session-2026-01-01T00-00-00000000.jsonl"), []byte(`{"sessionId":"11111111-2222","startTime":"2026-01-01T00:00:00Z","kind":"main"}`+"\n"), 0o600)

	found, err := Scan(context.Background(), Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("found %+v, want the one session", found)
	}
	s := found[0]
	if s.Agent != AgentGemini || s.ID != res.AgentSessionID || s.Dir != dir || s.Title != "Tidy the imports please" ||
		s.StartedAt.Before(before) || s.UpdatedAt.Before(s.StartedAt) {
		t.Fatalf("session %+v (want id %s in %s)", s, res.AgentSessionID, dir)
	}
	if got, _ := Scan(context.Background(), Options{Home: home, Exclude: func(agent, id string) bool { return agent == AgentGemini && id == s.ID }}); len(got) != 0 {
		t.Fatalf("Exclude kept %+v", got)
	}
}
