package docschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
}

// New prepares the schema source (JSON) registered under url, its $id.
// Compilation is deferred to the first use; a schema that does not compile
// is a bug in the committed file, which Compile lets a test catch.
func New(url string, source []byte) *Schema {
	return &Schema{url: url, compiled: sync.OnceValues(func() (*jsonschema.Schema, error) {
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
	collect(d, ve, unknownKey, &out)
	Sort(out)
	return out
}

func collect(d *Document, ve *jsonschema.ValidationError, unknownKey UnknownKeyFunc, out *[]Problem) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(d, c, unknownKey, out)
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
