package policy

import (
	_ "embed"
	"fmt"
	"strings"

	"reeve.dev/reeve/internal/docschema"
)

// The v1 JSON Schemas of the project's governance files, kept in the
// repository under hookbridge/policy/schemas so editors and other tools can
// use the same files.
var (
	//go:embed schemas/policy.v1.schema.json
	PolicySchemaV1 []byte
	//go:embed schemas/routes.v1.schema.json
	RoutesSchemaV1 []byte
	//go:embed schemas/access.v1.schema.json
	AccessSchemaV1 []byte
)

// SchemaDir is where the schemas live in the repository, for messages and docs.
const SchemaDir = "hookbridge/policy/schemas"

var (
	policySchema = docschema.New("https://reeve.dev/schemas/policy.v1.schema.json", PolicySchemaV1)
	routesSchema = docschema.New("https://reeve.dev/schemas/routes.v1.schema.json", RoutesSchemaV1)
	accessSchema = docschema.New("https://reeve.dev/schemas/access.v1.schema.json", AccessSchemaV1)
)

// Problem is one located error in a governance file:
// "file:line:col: pointer: message".
type Problem = docschema.Problem

// CompileSchemas reports whether every embedded schema compiles; a failure
// is a bug in a committed schema file.
func CompileSchemas() error {
	for _, s := range []*docschema.Schema{policySchema, routesSchema, accessSchema} {
		if err := s.Compile(); err != nil {
			return err
		}
	}
	return nil
}

// Route is one entry of a routes file, as much of it as check needs to
// find routes defined twice.
type Route struct {
	Name string
	File string
	Line int
}

// ValidateRoutes checks one .reeve/routes/*.yaml document against the
// routes v1 schema and returns its problems and (when the file parses) the
// routes it names, so a caller can check names across files.
func ValidateRoutes(file string, data []byte) ([]Problem, []Route) {
	d, problems := docschema.ParseYAML(file, data)
	if len(problems) > 0 {
		return problems, nil
	}
	problems = routesSchema.Validate(d, nil)
	var routes []Route
	m, _ := d.Value.(map[string]any)
	list, _ := m["routes"].([]any)
	seen := map[string]int{}
	for i, r := range list {
		rm, _ := r.(map[string]any)
		name, ok := rm["name"].(string)
		if !ok {
			continue
		}
		ptr := fmt.Sprintf("/routes/%d/name", i)
		pos := d.Pos(ptr)
		if first, dup := seen[name]; dup {
			problems = append(problems, d.Problem(ptr, fmt.Sprintf("route %q is already defined at line %d", name, first)))
			continue
		}
		seen[name] = pos.Line
		routes = append(routes, Route{Name: name, File: file, Line: pos.Line})
	}
	docschema.Sort(problems)
	return problems, routes
}

// ValidateAccess checks a .reeve/access.yaml document against the access v1
// schema; a user or team listed twice is a problem too.
func ValidateAccess(file string, data []byte) []Problem {
	d, problems := docschema.ParseYAML(file, data)
	if len(problems) > 0 {
		return problems
	}
	problems = accessSchema.Validate(d, nil)
	m, _ := d.Value.(map[string]any)
	list, _ := m["members"].([]any)
	seen := map[string]int{}
	for i, it := range list {
		mm, _ := it.(map[string]any)
		for _, kind := range []string{"user", "team"} {
			who, ok := mm[kind].(string)
			if !ok {
				continue
			}
			ptr := fmt.Sprintf("/members/%d/%s", i, kind)
			key := kind + "\x00" + strings.ToLower(who)
			if first, dup := seen[key]; dup {
				problems = append(problems, d.Problem(ptr, fmt.Sprintf("%s %q is already listed at line %d", kind, who, first)))
				continue
			}
			seen[key] = d.Pos(ptr).Line
		}
	}
	docschema.Sort(problems)
	return problems
}

// ValidatePolicyFile checks a policy file: its syntax, the v1 schema and
// the patterns in it. A missing file is an error wrapping fs.ErrNotExist.
func ValidatePolicyFile(file string) ([]Problem, error) {
	data, problems, err := readDocument(file)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	if len(problems) > 0 {
		return problems, nil
	}
	_, problems = Parse(file, data)
	return problems, nil
}
