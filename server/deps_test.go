// Package server_test checks the rules of direction of design section 1
// for the server and its command.
package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestRulesOfDirection(t *testing.T) {
	for _, d := range deps(t, "reeve.dev/reeve/server/sdk") {
		if d != "reeve.dev/reeve/server/sdk" {
			t.Errorf("server/sdk must import only the standard library; it imports %s", d)
		}
	}
	// The protocol leaves are the exception: daemon/wire (the control
	// protocol) and its one client, daemon/wireclient.
	leaves := map[string]bool{"reeve.dev/reeve/daemon/wire": true, "reeve.dev/reeve/daemon/wireclient": true}
	for _, d := range deps(t, "reeve.dev/reeve/server/...") {
		for _, banned := range []string{"reeve.dev/reeve/daemon", "reeve.dev/reeve/agents", "reeve.dev/reeve/hookbridge"} {
			if (d == banned || strings.HasPrefix(d, banned+"/")) && !leaves[d] {
				t.Errorf("server imports %s", d)
			}
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "reeve.dev/reeve/cli").Output()
	if err != nil {
		t.Fatalf("go list cli: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "reeve.dev/reeve/server/api") {
			t.Errorf("cli imports %s directly; it must go through server/host", d)
		}
	}
}
