package codex

import (
	"slices"
	"testing"

	"reeve.dev/reeve/agents"
)

// A turn's context reaches Codex as developer instructions, quoted as a
// TOML string whatever it holds.
func TestArgsCarryContext(t *testing.T) {
	ctx := "# Team context\n\nquote \" and backslash \\ and 'single'\n"
	args := Args(agents.Turn{Prompt: "p", Context: ctx})
	i := slices.Index(args, "-c")
	for i >= 0 && i+1 < len(args) && args[i+1] != "developer_instructions="+tomlString(ctx) {
		j := slices.Index(args[i+1:], "-c")
		if j < 0 {
			i = -1
			break
		}
		i += j + 1
	}
	if i < 0 {
		t.Fatalf("no developer_instructions in %q", args)
	}
	if slices.Index(args, "--") < i {
		t.Fatal("the override comes after --")
	}
	for _, a := range Args(agents.Turn{Prompt: "p"}) {
		if len(a) > 23 && a[:23] == "developer_instructions=" {
			t.Fatal("an empty context was passed")
		}
	}
}
