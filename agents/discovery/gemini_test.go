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

// Two chat files of one session (a resume in another minute) are one
// session: the first file's start and title, the latest file's update.
func TestGeminiSessionAcrossFiles(t *testing.T) {
	home := t.TempDir()
	proj := filepath.Join(home, ".gemini", "tmp", "p")
	os.MkdirAll(filepath.Join(proj, "chats"), 0o700)
	os.WriteFile(filepath.Join(proj, ".project_root"), []byte("/work/p\n"), 0o600)
	id := "abcdef12-3456"
	write := func(name, start, body string, mod time.Time) {
		p := filepath.Join(proj, "chats", name)
		os.WriteFile(p, []byte(`{"sessionId":"`+id+`","startTime":"`+start+`","kind":"main"}`+"\n"+body), 0o600)
		os.Chtimes(p, mod, mod)
	}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	write("session-2026-01-01T10-00-abcdef12.jsonl", "2026-01-01T10:00:00Z", `{"id":"1","type":"user","content":[{"text":"<session_context>x</session_context>"}]}`+"\n"+`{"id":"2","type":"user","content":[{"text":"first prompt"}]}`+"\n", t0.Add(time.Minute))
	write("session-2026-01-01T11-00-abcdef12.jsonl", "2026-01-01T11:00:00Z", `{"$set":{"messages":[]}}`+"\n", t0.Add(time.Hour+time.Minute))
	found, err := Scan(context.Background(), Options{Home: home})
	if err != nil || len(found) != 1 {
		t.Fatalf("found %+v %v", found, err)
	}
	s := found[0]
	if s.ID != id || s.Dir != "/work/p" || s.Title != "first prompt" || !s.StartedAt.Equal(t0) ||
		!s.UpdatedAt.Equal(t0.Add(time.Hour+time.Minute)) || filepath.Base(s.Path) != "session-2026-01-01T11-00-abcdef12.jsonl" {
		t.Fatalf("session %+v", s)
	}
}
