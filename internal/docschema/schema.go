package docschema

import (
	"fmt"
	"strings"
	"sync"

	"reeve.dev/reeve/internal/jsonschema"
)

// Schema is an embedded JSON Schema, compiled on first use.
type Schema struct {
	url      string
	compiled func() (*jsonschema.Schema, error)
}

// New prepares the schema source (JSON) registered under url, its $id.
// Compilation is deferred to the first use; a schema that does not compile
// is a bug in the committed file, which Compile lets a test catch.
func New(url string, source []byte) *Schema {
	return &Schema{url: url, compiled: sync.OnceValues(func() (*jsonschema.Schema, error) {
		sch, err := jsonschema.CompileJSON(source)
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", url, err)
		}
		return sch, nil
	})}
}

// Compile compiles the schema (once) and reports whether it is usable.
func (s *Schema) Compile() error {
	_, err := s.compiled()
	return err
}

// UnknownKeyFunc words the problem for an unknown key name under the object
// at parent (a JSON pointer, "" for the root).
type UnknownKeyFunc func(parent, name string) string

// Validate checks d against the schema and returns one located problem per
// failure, so every mistake is reported at once. unknownKey may be nil for
// the plain `unknown key "x"` wording.
func (s *Schema) Validate(d *Document, unknownKey UnknownKeyFunc) []Problem {
	sch, err := s.compiled()
	if err != nil {
		return []Problem{{File: d.File, Message: err.Error()}}
	}
	errs := sch.Validate(d.Value)
	if len(errs) == 0 {
		return nil
	}
	if unknownKey == nil {
		unknownKey = func(_, name string) string { return fmt.Sprintf("unknown key %q", name) }
	}
	var out []Problem
	for _, e := range errs {
		collect(d, e, unknownKey, &out)
	}
	Sort(out)
	return out
}

func collect(d *Document, e *jsonschema.Error, unknownKey UnknownKeyFunc, out *[]Problem) {
	ptr := e.Pointer()
	switch e.Keyword {
	case "anyOf", "oneOf":
		if msg, ok := alternatives(e); ok {
			*out = append(*out, d.Problem(ptr, msg))
			return
		}
		if anyEmpty(e.Branches) {
			// More than one alternative matched (oneOf): the branches
			// have nothing to report.
			*out = append(*out, d.Problem(ptr, e.Message))
			return
		}
		for _, b := range e.Branches {
			for _, c := range b {
				collect(d, c, unknownKey, out)
			}
		}
	case "additionalProperties":
		// One problem per unknown key, placed on the key itself.
		for _, name := range e.Names {
			child := ptr + "/" + EscapePointer(name)
			p := d.keyPos[child]
			*out = append(*out, Problem{File: d.File, Line: p.Line, Column: p.Column, Pointer: child, Message: unknownKey(ptr, name)})
		}
	default:
		*out = append(*out, d.Problem(ptr, e.Message))
	}
}

func anyEmpty(branches [][]*jsonschema.Error) bool {
	for _, b := range branches {
		if len(b) == 0 {
			return true
		}
	}
	return false
}

// alternatives words a failed oneOf whose branches differ only in which
// keys they require (the schema idiom for "exactly one of these keys") as
// one problem naming the keys, instead of a "missing" or "not" line per
// branch.
func alternatives(e *jsonschema.Error) (string, bool) {
	if e.Keyword != "oneOf" || len(e.Schemas) < 2 {
		return "", false
	}
	for _, b := range e.Branches {
		for _, c := range b {
			if len(c.Path) != len(e.Path) || (c.Keyword != "required" && c.Keyword != "not") {
				return "", false
			}
		}
	}
	var keys []string
	for _, b := range e.Schemas {
		bm, _ := b.(map[string]any)
		req, _ := bm["required"].([]any)
		if len(req) != 1 {
			return "", false
		}
		keys = append(keys, jsonschema.Text(req[0]))
	}
	return "needs exactly one of " + strings.Join(keys, ", "), true
}
