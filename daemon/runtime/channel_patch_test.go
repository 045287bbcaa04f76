package runtime

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The record of a decision names a patch by its files, read by the same
// parser the policy uses, whichever way the patch came: apply_patch's own
// input, the command of a shell tool, a here-document to apply_patch or
// git apply. A patch that does not parse names nothing (the policy denied
// it), and neither does a command that only mentions a patch header.
func TestWhatIsDecidedPatches(t *testing.T) {
	env := "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: b.go\n*** Move to: c.go\n@@\n-x\n+y\n*** Delete File: d\n*** End Patch"
	unified := "--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n"
	cases := []struct {
		name    string
		input   any
		command string
		paths   []string
	}{
		{"apply_patch input", map[string]any{"input": env}, "", []string{"a.txt", "b.go", "c.go", "d"}},
		{"command envelope", map[string]any{"command": []string{"apply_patch", env}}, "", []string{"a.txt", "b.go", "c.go", "d"}},
		{"heredoc", map[string]any{"cmd": "apply_patch <<'EOF'\n" + env + "\nEOF\n"}, "", []string{"a.txt", "b.go", "c.go", "d"}},
		{"git apply heredoc", map[string]any{"command": "git apply <<'EOF'\n" + unified + "EOF\n"}, "", []string{"x.go"}},
		{"unified patch field", map[string]any{"patch": unified}, "", []string{"x.go"}},
		{"broken patch", map[string]any{"input": "*** Begin Patch\n*** Frobnicate: x\n*** End Patch"}, "", nil},
		{"mention only", map[string]any{"command": "echo '+++ b/evil'"}, "echo '+++ b/evil'", nil},
		{"write", map[string]any{"file_path": "/w/f.txt", "content": "x"}, "", []string{"/w/f.txt"}},
	}
	for _, c := range cases {
		raw, _ := json.Marshal(c.input)
		command, paths := whatIsDecided(raw)
		if command != c.command || !reflect.DeepEqual(paths, c.paths) {
			t.Errorf("%s: command %q paths %q, want %q %q", c.name, command, paths, c.command, c.paths)
		}
	}
}
