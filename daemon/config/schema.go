package config

import (
	"bytes"
	_ "embed"
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

// SchemaV1 is the JSON Schema every config file is checked against. It is
// kept in the repository as config.v1.schema.json so editors and other tools
// can use the same file.
//
//go:embed config.v1.schema.json
var SchemaV1 []byte

// SchemaV1Path is where the schema lives in the repository, for messages and docs.
const SchemaV1Path = "daemon/config/config.v1.schema.json"

const schemaV1URL = "https://reeve.dev/schemas/config.v1.schema.json"

// compiledV1 compiles the embedded schema once; a failure is a bug in the
// committed schema, which a test catches.
var compiledV1 = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(SchemaV1))
	if err != nil {
		return nil, fmt.Errorf("parse config schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaV1URL, doc); err != nil {
		return nil, fmt.Errorf("load config schema: %w", err)
	}
	sch, err := c.Compile(schemaV1URL)
	if err != nil {
		return nil, fmt.Errorf("compile config schema: %w", err)
	}
	return sch, nil
})

var printer = message.NewPrinter(language.English)

// schemaProblems validates the document and flattens the library's error
// tree into one located problem per leaf, so every mistake is reported at
// once rather than the first one per run.
func (d *document) schemaProblems() []Problem {
	sch, err := compiledV1()
	if err != nil {
		return []Problem{{File: d.file, Message: err.Error()}}
	}
	err = sch.Validate(d.value)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{File: d.file, Message: "validate: " + err.Error()}}
	}
	var out []Problem
	d.collect(ve, &out)
	return out
}

func (d *document) collect(ve *jsonschema.ValidationError, out *[]Problem) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			d.collect(c, out)
		}
		return
	}
	ptr := pointerOf(ve.InstanceLocation)
	if ap, ok := ve.ErrorKind.(*schemakind.AdditionalProperties); ok {
		// One problem per unknown key, placed on the key itself.
		for _, name := range ap.Properties {
			child := ptr + "/" + escapePointer(name)
			p := d.keyPos[child]
			*out = append(*out, Problem{File: d.file, Line: p.line, Column: p.col, Pointer: child, Message: unknownKeyMessage(ptr, name)})
		}
		return
	}
	p := d.pos[ptr]
	*out = append(*out, Problem{File: d.file, Line: p.line, Column: p.col, Pointer: ptr, Message: kindMessage(ve.ErrorKind)})
}

// kindMessage words the errors a config file commonly has the way the rest
// of reeve quotes values (Go/JSON double quotes); the library's wording is
// kept for the rest.
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

func unknownKeyMessage(parent, name string) string {
	if parent != "" {
		return fmt.Sprintf("unknown key %q", name)
	}
	switch name {
	case KeyHome:
		return fmt.Sprintf("%q cannot be set in the config file, which is found through the home; use --home or %s", name, EnvName(KeyHome))
	case KeyConfigFile, "config":
		return fmt.Sprintf("%q cannot be set in the config file; use --config or %s", name, EnvName(KeyConfigFile))
	}
	known := []string{"version"}
	for _, s := range settings {
		known = append(known, s.key)
	}
	return fmt.Sprintf("unknown key %q (v1 keys: %s)", name, strings.Join(known, ", "))
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}
