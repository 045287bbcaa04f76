package jsonschema_test

import (
	"strings"
	"testing"

	"reeve.dev/reeve/internal/jsonschema"
)

const testSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["version"],
  "properties": {
    "version": {"const": 1},
    "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
    "mode": {"enum": ["a", "b"]},
    "port": {"type": ["integer", "string"], "minimum": 1, "maximum": 65535},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": true},
    "rule": {"$ref": "#/$defs/rule"},
    "either": {"anyOf": [{"type": "null"}, {"type": "string", "enum": ["x"]}]},
    "meta": {"type": "object", "additionalProperties": {"type": "integer"}}
  },
  "$defs": {
    "rule": {
      "type": "object",
      "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
      "oneOf": [
        {"required": ["a"], "not": {"required": ["b"]}},
        {"required": ["b"], "not": {"required": ["a"]}}
      ]
    }
  }
}`

func TestValidate(t *testing.T) {
	s, err := jsonschema.CompileJSON([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		doc  string
		want []string // "pointer keyword: message"
	}{
		{`{"version": 1}`, nil},
		{`{"version": 1.0, "name": "abc", "mode": "b", "port": 80, "tags": ["x", "y"], "rule": {"a": true}, "either": null, "meta": {"k": 2}}`, nil},
		{`{"version": 1, "port": "8080", "either": "x"}`, nil},
		{`{}`, []string{` required: missing required key "version"`}},
		{`[]`, []string{` type: got array, want object`}},
		{`{"version": 2}`, []string{`/version const: value must be 1, got 2`}},
		{`{"version": 1, "extra": 1, "more": 2}`, []string{` additionalProperties: unknown key "extra", "more"`}},
		{`{"version": 1, "name": ""}`, []string{`/name minLength: minLength: got 0, want 1`, `/name pattern: "" does not match pattern "^[a-z]+$"`}},
		{`{"version": 1, "name": "abcdef"}`, []string{`/name maxLength: maxLength: got 6, want 5`}},
		{`{"version": 1, "name": "ééé"}`, []string{`/name pattern: "ééé" does not match pattern "^[a-z]+$"`}},
		{`{"version": 1, "mode": "c"}`, []string{`/mode enum: value must be one of "a", "b", got "c"`}},
		{`{"version": 1, "port": 1.5}`, []string{`/port type: got number, want integer or string`}},
		{`{"version": 1, "port": 0}`, []string{`/port minimum: value must be at least 1, got 0`}},
		{`{"version": 1, "port": 99999999999999999999999}`, []string{`/port maximum: maximum: got 99999999999999999999999, want 65535`}},
		{`{"version": 1, "tags": []}`, []string{`/tags minItems: minItems: got 0, want 1`}},
		{`{"version": 1, "tags": ["a", "b", "c", "d"]}`, []string{`/tags maxItems: maxItems: got 4, want 3`}},
		{`{"version": 1, "tags": ["a", 1, "a"]}`, []string{`/tags uniqueItems: items at 0 and 2 are equal`, `/tags/1 type: got number, want string`}},
		{`{"version": 1, "rule": {"a": true, "b": false}}`, []string{`/rule oneOf: matches none of the alternatives`}},
		{`{"version": 1, "rule": {}}`, []string{`/rule oneOf: matches none of the alternatives`}},
		{`{"version": 1, "either": "y"}`, []string{`/either anyOf: matches none of the alternatives`}},
		{`{"version": 1, "meta": {"k": "v"}}`, []string{`/meta/k type: got string, want integer`}},
	}
	for _, tt := range tests {
		doc, err := jsonschema.Decode([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range s.Validate(doc) {
			got = append(got, e.Pointer()+" "+e.Keyword+": "+e.Message)
		}
		// Sort-independent comparison: the order of keywords is not promised.
		if strings.Join(sorted(got), "\n") != strings.Join(sorted(tt.want), "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tt.doc, got, tt.want)
		}
	}
}

func TestCompositeBranches(t *testing.T) {
	s, err := jsonschema.CompileJSON([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonschema.Decode([]byte(`{"version": 1, "either": "y"}`))
	errs := s.Validate(doc)
	if len(errs) != 1 || len(errs[0].Branches) != 2 || len(errs[0].Schemas) != 2 {
		t.Fatalf("errors %+v", errs)
	}
	if b := errs[0].Branches; b[0][0].Keyword != "type" || b[1][0].Keyword != "enum" || b[1][0].Pointer() != "/either" {
		t.Errorf("branches %+v %+v", b[0][0], b[1][0])
	}
}

// TestCompileRefusesWhatItCannotCheck: a keyword the validator does not
// know would silently accept anything, so the schema is refused instead.
func TestCompileRefusesWhatItCannotCheck(t *testing.T) {
	for _, src := range []string{
		`{"type": "object", "propertyNames": {"pattern": "^a"}}`,
		`{"type": "object", "properties": {"a": {"requried": ["x"]}}}`,
		`{"type": "string", "pattern": "("}`,
		`{"$ref": "#/$defs/missing"}`,
		`{"$ref": "https://example.com/other.json"}`,
		`{"type": 3}`,
		`{"allOf": []}`,
		`{"minLength": "3"}`,
		`{"required": [1]}`,
		`[1]`,
	} {
		if _, err := jsonschema.CompileJSON([]byte(src)); err == nil {
			t.Errorf("%s compiled", src)
		}
	}
}

// TestSelfReference: a schema that refers to itself without consuming the
// value ends with an error instead of recursing for ever.
func TestSelfReference(t *testing.T) {
	s, err := jsonschema.CompileJSON([]byte(`{"$ref": "#"}`))
	if err != nil {
		t.Fatal(err)
	}
	errs := s.Validate("x")
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "nest too deeply") {
		t.Errorf("errors %v", errs)
	}
}

// TestOpenAPILayout: a document of named schemas under components, with
// references between them, as the control plane's OpenAPI document has.
func TestOpenAPILayout(t *testing.T) {
	root, err := jsonschema.Compile(map[string]any{
		"components": map[string]any{"schemas": map[string]any{
			"A": map[string]any{"type": "object", "properties": map[string]any{"b": map[string]any{"$ref": "#/components/schemas/B"}}},
			"B": map[string]any{"type": "integer", "minimum": 3},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := root.Sub("#/components/schemas/A")
	if err != nil {
		t.Fatal(err)
	}
	errs := a.Validate(map[string]any{"b": int64(2)})
	if len(errs) != 1 || errs[0].Pointer() != "/b" || errs[0].Keyword != "minimum" {
		t.Errorf("errors %v", errs)
	}
	if _, err := root.Sub("#/components/schemas/C"); err == nil {
		t.Error("a missing schema resolved")
	}
	if _, err := jsonschema.Compile(map[string]any{"components": map[string]any{"schemas": map[string]any{"A": map[string]any{"typo": 1}}}}); err == nil {
		t.Error("an unknown keyword in a component compiled")
	}
}

func TestDecodeRefusesTrailingData(t *testing.T) {
	for _, src := range []string{`{} {}`, `{}x`, `[1]]`, ``, `{"a":}`} {
		if _, err := jsonschema.Decode([]byte(src)); err == nil {
			t.Errorf("%q decoded", src)
		}
	}
	v, err := jsonschema.Decode([]byte(` {"n": 12345678901234567890} `))
	if err != nil {
		t.Fatal(err)
	}
	if jsonschema.TypeOf(v.(map[string]any)["n"]) != "integer" {
		t.Error("a big integer lost its type")
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
