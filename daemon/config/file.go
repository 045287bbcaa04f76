package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"reeve.dev/reeve/internal/docschema"
)

// Problem is one error in a config file and where it is: the shared
// located-problem type, rendered "file:line:col: pointer: message".
type Problem = docschema.Problem

// FileError is a config file that cannot be used, with every problem found.
type FileError struct {
	File     string
	Problems []Problem
}

func (e *FileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config file %s is invalid (%d problem", e.File, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// ValidateFile checks the file at path against the v1 schema and the
// semantic rules of its values. The problems are the findings; the error is
// for a file that cannot be read at all (it wraps fs.ErrNotExist when the
// file is missing).
func ValidateFile(path string) ([]Problem, error) {
	data, err := docschema.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	doc, problems := parseDocument(path, data)
	if len(problems) > 0 {
		return problems, nil
	}
	return doc.validate(), nil
}

// loadFile reads, parses and validates a config file, returning the values
// it sets, typed like the defaults.
func loadFile(path string) (map[string]any, error) {
	data, err := docschema.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	doc, problems := parseDocument(path, data)
	if len(problems) == 0 {
		problems = doc.validate()
	}
	if len(problems) > 0 {
		return nil, &FileError{File: path, Problems: problems}
	}
	return doc.settingValues(), nil
}

// document is a parsed config file: the JSON-shaped value with the position
// of every value and key, by JSON pointer.
type document struct{ *docschema.Document }

// parseDocument parses YAML or JSON, chosen by extension.
func parseDocument(path string, data []byte) (*document, []Problem) {
	var (
		doc      *docschema.Document
		problems []Problem
	)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		doc, problems = docschema.ParseYAML(path, data)
	case ".json":
		doc, problems = docschema.ParseJSON(path, data)
	default:
		return nil, []Problem{{File: path, Message: fmt.Sprintf("unsupported config file extension %q: use .yaml, .yml or .json", ext)}}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return &document{doc}, nil
}

// validate runs the schema, then the semantic checks on the values the
// schema accepted, and returns every problem in file order.
func (d *document) validate() []Problem {
	problems := d.schemaProblems()
	if m, ok := d.Value.(map[string]any); ok {
		for _, s := range settings {
			raw, present := m[s.key]
			ptr := "/" + s.key
			if !present || s.check == nil || hasProblemAt(problems, ptr) {
				continue
			}
			v, ok := typed(s, raw)
			if !ok {
				continue
			}
			if err := s.check(v); err != nil {
				problems = append(problems, d.Problem(ptr, err.Error()))
			}
		}
	}
	docschema.Sort(problems)
	return problems
}

func hasProblemAt(problems []Problem, ptr string) bool {
	for _, p := range problems {
		if p.Pointer == ptr || strings.HasPrefix(p.Pointer, ptr+"/") {
			return true
		}
	}
	return false
}

// settingValues returns the settings the (valid) file sets, typed like the
// defaults, for the file layer of Load.
func (d *document) settingValues() map[string]any {
	m, _ := d.Value.(map[string]any)
	out := map[string]any{}
	for _, s := range settings {
		if raw, ok := m[s.key]; ok {
			if v, ok := typed(s, raw); ok {
				out[s.key] = v
			}
		}
	}
	return out
}

// typed converts a schema-valid JSON-shaped value to the setting's Go type.
func typed(s setting, raw any) (any, bool) {
	switch s.kind {
	case kindString:
		switch v := raw.(type) {
		case string:
			return v, true
		case int64:
			// The schema allows a number only for listen, as a bare port.
			return strconv.FormatInt(v, 10), true
		}
		return nil, false
	case kindBool:
		v, ok := raw.(bool)
		return v, ok
	case kindInt:
		switch n := raw.(type) {
		case int64:
			return int(n), true
		case float64:
			if n == float64(int(n)) {
				return int(n), true
			}
		}
		return nil, false
	case kindList:
		items, ok := raw.([]any)
		if !ok {
			return nil, false
		}
		out := make([]string, 0, len(items))
		for _, it := range items {
			str, ok := it.(string)
			if !ok {
				return nil, false
			}
			out = append(out, str)
		}
		return out, true
	}
	return nil, false
}
