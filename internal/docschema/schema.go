package docschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	schemakind "github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is an embedded JSON Schema, compiled on first use.
type Schema struct {
	url      string
	compiled func() (*jsonschema.Schema, error)
	raw      func() any // the source as JSON values, for wording alternatives
}

// New prepares the schema source (JSON) registered under url, its $id.
// Compilation is deferred to the first use; a schema that does not compile
// is a bug in the committed file, which Compile lets a test catch.
func New(url string, source []byte) *Schema {
	raw := sync.OnceValue(func() any {
		var v any
		_ = json.Unmarshal(source, &v) // a bad source fails compilation anyway
		return v
	})
	return &Schema{url: url, raw: raw, compiled: sync.OnceValues(func() (*jsonschema.Schema, error) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(source))
		if err != nil {
			return nil, fmt.Errorf("parse schema %s: %w", url, err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("load schema %s: %w", url, err)
		}
		sch, err := c.Compile(url)
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
// leaf of the library's error tree, so every mistake is reported at once.
// unknownKey may be nil for the plain `unknown key "x"` wording.
func (s *Schema) Validate(d *Document, unknownKey UnknownKeyFunc) []Problem {
	sch, err := s.compiled()
	if err != nil {
		return []Problem{{File: d.File, Message: err.Error()}}
	}
	err = sch.Validate(d.Value)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{File: d.File, Message: "validate: " + err.Error()}}
	}
	if unknownKey == nil {
		unknownKey = func(_, name string) string { return fmt.Sprintf("unknown key %q", name) }
	}
	var out []Problem
	s.collect(d, ve, unknownKey, &out)
	Sort(out)
	return out
}

func (s *Schema) collect(d *Document, ve *jsonschema.ValidationError, unknownKey UnknownKeyFunc, out *[]Problem) {
	if msg, ok := s.alternatives(ve); ok {
		*out = append(*out, d.Problem(pointerOf(ve.InstanceLocation), msg))
		return
	}
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			s.collect(d, c, unknownKey, out)
		}
		return
	}
	ptr := pointerOf(ve.InstanceLocation)
	if ap, ok := ve.ErrorKind.(*schemakind.AdditionalProperties); ok {
		// One problem per unknown key, placed on the key itself.
		for _, name := range ap.Properties {
			child := ptr + "/" + EscapePointer(name)
			p := d.keyPos[child]
			*out = append(*out, Problem{File: d.File, Line: p.Line, Column: p.Column, Pointer: child, Message: unknownKey(ptr, name)})
		}
		return
	}
	*out = append(*out, d.Problem(ptr, kindMessage(ve.ErrorKind)))
}

// alternatives words a failed oneOf whose branches differ only in which
// keys they require (the schema idiom for "exactly one of these keys") as
// one problem naming the keys, instead of a "missing" or "'not' failed"
// line per branch.
func (s *Schema) alternatives(ve *jsonschema.ValidationError) (string, bool) {
	if _, ok := ve.ErrorKind.(*schemakind.OneOf); !ok {
		return "", false
	}
	if !leavesAreKeyChecks(ve, len(ve.InstanceLocation)) {
		return "", false
	}
	_, frag, _ := strings.Cut(ve.SchemaURL, "#")
	node := lookup(s.raw(), frag)
	for _, tok := range ve.ErrorKind.KeywordPath() {
		node = lookup(node, "/"+EscapePointer(tok))
	}
	branches, ok := node.([]any)
	if !ok || len(branches) < 2 {
		return "", false
	}
	var keys []string
	for _, b := range branches {
		bm, _ := b.(map[string]any)
		req, _ := bm["required"].([]any)
		if len(req) != 1 {
			return "", false
		}
		keys = append(keys, jsonText(req[0]))
	}
	return "needs exactly one of " + strings.Join(keys, ", "), true
}

// leavesAreKeyChecks reports whether every leaf under ve is a required or
// not keyword on the object at the same depth.
func leavesAreKeyChecks(ve *jsonschema.ValidationError, depth int) bool {
	for _, c := range ve.Causes {
		if len(c.InstanceLocation) != depth {
			return false
		}
		if len(c.Causes) > 0 {
			if !leavesAreKeyChecks(c, depth) {
				return false
			}
			continue
		}
		switch c.ErrorKind.(type) {
		case *schemakind.Required, *schemakind.Not:
		default:
			return false
		}
	}
	return true
}

// lookup follows a JSON pointer into JSON values; nil when it leads nowhere.
func lookup(v any, ptr string) any {
	if ptr == "" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n := v.(type) {
		case map[string]any:
			v = n[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil
			}
			v = n[i]
		default:
			return nil
		}
	}
	return v
}

var printer = message.NewPrinter(language.English)

// kindMessage words common errors the way the rest of reeve quotes values
// (Go/JSON double quotes); the library's wording is kept for the rest.
func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *schemakind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonText(w)
		}
		return fmt.Sprintf("value must be one of %s, got %s", strings.Join(want, ", "), jsonText(k.Got))
	case *schemakind.Const:
		return fmt.Sprintf("value must be %s, got %s", jsonText(k.Want), jsonText(k.Got))
	case *schemakind.Minimum:
		return fmt.Sprintf("value must be at least %s, got %s", k.Want.RatString(), k.Got.RatString())
	case *schemakind.Required:
		quoted := make([]string, len(k.Missing))
		for i, m := range k.Missing {
			quoted[i] = fmt.Sprintf("%q", m)
		}
		return "missing required key " + strings.Join(quoted, ", ")
	}
	return k.LocalizedString(printer)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(EscapePointer(t))
	}
	return b.String()
}
