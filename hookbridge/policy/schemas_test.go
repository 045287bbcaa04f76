package policy

import (
	"strings"
	"testing"
)

func TestRoutesSchema(t *testing.T) {
	good := `version: 1
routes:
  - name: bugfix
    description: fix labelled bugs
    on:
      trigger: issue
      labels: [bug]
    agent: claude
    model: claude-sonnet-4-5
    prompt: "Fix {{.Title}}: {{.Body}}"
    mode: detect
    timeout_seconds: 3600
  - name: nightly-deps
    on: {trigger: schedule, schedule: "0 3 * * *"}
    agent: codex
    prompt_file: prompts/deps.md
`
	problems, routes := ValidateRoutes("r.yaml", []byte(good))
	if len(problems) > 0 {
		t.Fatalf("good routes rejected:\n%s", render(problems))
	}
	if len(routes) != 2 || routes[0].Name != "bugfix" || routes[0].Line != 3 || routes[1].Name != "nightly-deps" {
		t.Errorf("routes = %+v", routes)
	}

	bad := strings.Join([]string{
		"version: 1",
		"routes:",
		"  - name: Bug_Fix",       // 3: bad name
		"    on: {trigger: push}", // 4: bad trigger
		"    agent: claude",
		"    prompt: x",
		"    prompt_file: y.md", // both prompt and prompt_file
		"  - name: two",         // 8: no agent, no prompt
		"    on: {trigger: manual}",
		"    mode: yolo", // 10
		"  - name: two",  // 11: duplicate name
		"    on: {trigger: manual}",
		"    agent: claude",
		"    prompt: y",
	}, "\n") + "\n"
	problems, _ = ValidateRoutes("r.yaml", []byte(bad))
	want := []wantProblem{
		{3, 5, "/routes/0", `needs exactly one of "prompt", "prompt_file"`},
		{3, 11, "/routes/0/name", "does not match pattern"},
		{4, 19, "/routes/0/on/trigger", `value must be one of "manual"`},
		{8, 5, "/routes/1", `missing required key "agent"`},
		{8, 5, "/routes/1", `needs exactly one of "prompt", "prompt_file"`},
		{10, 11, "/routes/1/mode", `value must be one of "detect", "bypass", got "yolo"`},
		{11, 11, "/routes/2/name", `route "two" is already defined at line 8`},
	}
	checkWant(t, "r.yaml", problems, want)
}

func TestAccessSchema(t *testing.T) {
	good := `version: 1
default_role: viewer
members:
  - user: alice@example.com
    role: admin
  - team: platform
    role: approver
  - user: bob
    role: operator
`
	if problems := ValidateAccess("a.yaml", []byte(good)); len(problems) > 0 {
		t.Fatalf("good access rejected:\n%s", render(problems))
	}
	bad := strings.Join([]string{
		"version: 1",
		"default_role: owner", // 2
		"members:",
		"  - user: alice",    // 4
		"    role: root",     // 5
		"  - team: Platform", // 6: bad slug
		"    role: viewer",
		"  - role: viewer", // 8: neither user nor team
		"  - user: Alice",  // 9: listed twice (case-insensitively)
		"    role: viewer",
	}, "\n") + "\n"
	problems := ValidateAccess("a.yaml", []byte(bad))
	checkWant(t, "a.yaml", problems, []wantProblem{
		{2, 15, "/default_role", `got "owner"`},
		{5, 11, "/members/0/role", `got "root"`},
		{6, 11, "/members/1/team", "does not match pattern"},
		{8, 5, "/members/2", `needs exactly one of "user", "team"`},
		{9, 11, "/members/3/user", `user "Alice" is already listed at line 4`},
	})
	if problems := ValidateAccess("a.yaml", []byte("version: 1\nmembers: [\n")); len(problems) != 1 || problems[0].Line != 3 {
		t.Errorf("malformed access: %v", problems)
	}
}

func checkWant(t *testing.T, file string, got []Problem, want []wantProblem) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), render(got))
	}
	for i, w := range want {
		g := got[i]
		if g.File != file || g.Line != w.line || g.Column != w.col || g.Pointer != w.pointer || !strings.Contains(g.Message, w.message) {
			t.Errorf("problem %d = %s\nwant %d:%d %s ...%s...", i, g, w.line, w.col, w.pointer, w.message)
		}
	}
}
