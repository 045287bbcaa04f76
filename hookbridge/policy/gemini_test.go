package policy

import (
	"encoding/json"
	"testing"
)

// Gemini CLI's shell tool is read as a command line, and its dir_path is
// where the command runs, as Codex's workdir is.
func TestGeminiShellTool(t *testing.T) {
	root := t.TempDir()
	in, _ := json.Marshal(map[string]any{"command": "/bin/rm -rf x", "description": "clean", "dir_path": "/etc"})
	f := extract(Request{Tool: "run_shell_command", Input: in, Workdir: root})
	if !f.shell || f.bad != "" || len(f.cmds) == 0 || f.cmds[0].text != "rm -rf x" {
		t.Fatalf("facts %+v", f)
	}
	if len(f.paths) != 1 || !f.paths[0].outside || f.paths[0].abs != "/etc" {
		t.Fatalf("paths %+v: want the command's directory /etc, outside", f.paths)
	}
	bad, _ := json.Marshal(map[string]any{"command": "ls", "dir_path": 5})
	if f := extract(Request{Tool: "run_shell_command", Input: bad, Workdir: root}); f.bad == "" {
		t.Fatal("a dir_path that is not a string was read")
	}
}
