package codex

import (
	"strings"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
)

// A turn's context reaches the model as Codex's developer instructions,
// whatever it holds, and never as a command-line flag.
func TestContextReachesTheModel(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{{Text: "ok"}}})
	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	ctx := "# Team context\n\nquote \" and backslash \\ and 'single' ctx-marker-42\n"
	turn := agents.Turn{Prompt: "p", Context: ctx, Dir: t.TempDir(), StateDir: t.TempDir(), Env: agenttest.CodexEnv(home, t.TempDir())}
	for _, a := range Args(turn) {
		if strings.Contains(a, "ctx-marker-42") {
			t.Fatalf("the context is on the command line: %q", a)
		}
	}
	_, res := runTurn(t, adapterFor(exe), turn)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	main := srv.MainRequests()
	if len(main) == 0 {
		t.Fatal("no model request")
	}
	in, err := agenttest.ResponsesInput(main[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range in {
		found = found || (it.Role == "developer" && strings.Contains(string(it.Content), "ctx-marker-42") && strings.Contains(string(it.Content), `backslash \\ and 'single'`))
	}
	if !found {
		t.Fatalf("no developer message with the context (%d input items)", len(in))
	}
}
