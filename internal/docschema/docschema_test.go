package docschema

import (
	"strings"
	"testing"
)

var testSchema = New("https://example.test/s.json", []byte(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["name"],
  "properties": {
    "name": {"type": "string"},
    "a": {"type": "integer"},
    "b": {"type": "integer"}
  },
  "oneOf": [
    {"required": ["a"], "not": {"required": ["b"]}},
    {"required": ["b"], "not": {"required": ["a"]}}
  ]
}`))

func TestValidateLocatesEveryProblem(t *testing.T) {
	d, problems := ParseYAML("f.yaml", []byte("a: 1\nb: x\nextra: true\n"))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	got := testSchema.Validate(d, func(parent, name string) string { return "no " + name + " under " + parent + "!" })
	want := []string{
		`f.yaml:1:1: missing required key "name"`,
		`f.yaml:1:1: needs exactly one of "a", "b"`,
		`f.yaml:2:4: /b: got string, want integer`,
		`f.yaml:3:1: /extra: no extra under !`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("problem %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestParseJSONPositions(t *testing.T) {
	d, problems := ParseJSON("f.json", []byte("{\n  \"name\": \"x\",\n  \"a\": 1\n}\n"))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if p := d.Pos("/a"); p != (Position{3, 8}) {
		t.Errorf("Pos(/a) = %+v", p)
	}
	if p := d.KeyPos("/a"); p != (Position{3, 3}) {
		t.Errorf("KeyPos(/a) = %+v", p)
	}
	if problems := testSchema.Validate(d, nil); len(problems) != 0 {
		t.Errorf("valid document: %v", problems)
	}
	_, problems = ParseJSON("f.json", []byte("{\"a\": 1,}"))
	if len(problems) != 1 || problems[0].Line != 1 || problems[0].Column != 9 || !strings.HasPrefix(problems[0].Message, "invalid JSON") {
		t.Errorf("syntax error: %v", problems)
	}
}

func TestParseYAMLRejectsDeepNesting(t *testing.T) {
	src := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	_, problems := ParseYAML("f.yaml", []byte(src))
	if len(problems) == 0 || !strings.Contains(problems[0].Message, "nested too deeply") {
		t.Errorf("problems %v", problems)
	}
}
