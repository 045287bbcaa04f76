package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

func TestLoadProjectAccess(t *testing.T) {
	dir := t.TempDir()
	if a := LoadProjectAccess(dir); a != nil {
		t.Fatalf("no file: %+v", a)
	}
	file := filepath.Join(dir, ".reeve", "access.yaml")
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte("version: 1\nmembers:\n  - user: a@example.com\n    role: approver\n  - team: platform\n    role: viewer\n"), 0o644)
	a := LoadProjectAccess(dir)
	if a == nil || a.Invalid != "" || a.DefaultRole != "" || len(a.Members) != 2 || a.Members[1].Team != "platform" {
		t.Fatalf("valid file: %+v", a)
	}
	if got := a.SessionRole("A@example.com", nil); got != sdk.SessionApprover {
		t.Fatalf("listed user: %q", got)
	}
	if got := a.SessionRole("b@example.com", nil); got != sdk.SessionViewer {
		t.Fatalf("unlisted with the default unset: %q", got)
	}
	os.WriteFile(file, []byte("version: 1\ndefault_role: root\nmembers:\n  - user: a@example.com\n    role: admin\n"), 0o644)
	if a := LoadProjectAccess(dir); a == nil || !strings.Contains(a.Invalid, "not valid") || a.SessionRole("a@example.com", nil) != sdk.SessionNone {
		t.Fatalf("invalid file: %+v", a)
	}
	// A file that cannot be read refuses too.
	os.Remove(file)
	os.Mkdir(file, 0o755)
	if a := LoadProjectAccess(dir); a == nil || a.Invalid == "" {
		t.Fatalf("unreadable file: %+v", a)
	}
}
