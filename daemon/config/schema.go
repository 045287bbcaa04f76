package config

import (
	_ "embed"
	"fmt"
	"strings"

	"reeve.dev/reeve/internal/docschema"
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

var schemaV1 = docschema.New(schemaV1URL, SchemaV1)

// compiledV1 compiles the embedded schema once; a failure is a bug in the
// committed schema, which a test catches.
func compiledV1() (*docschema.Schema, error) { return schemaV1, schemaV1.Compile() }

// schemaProblems validates the document against the v1 schema; every
// mistake is reported at once rather than the first one per run.
func (d *document) schemaProblems() []Problem {
	return schemaV1.Validate(d.Document, unknownKeyMessage)
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
