package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one error in a config file and where it is.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`    // 1-based; 0 when the parser could not say
	Column  int    `json:"column"`  // 1-based; 0 when the parser could not say
	Pointer string `json:"pointer"` // JSON pointer of the offending value; "" for the document itself
	Message string `json:"message"`
}

// String renders the problem the way compilers do, so editors can jump to
// it: "file:line:col: pointer: message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	b.WriteString(": ")
	if p.Pointer != "" {
		b.WriteString(p.Pointer)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

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
	data, err := os.ReadFile(path)
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
	data, err := os.ReadFile(path)
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

// position is a 1-based line and column in the file.
type position struct{ line, col int }

// document is a parsed config file: its value in the shape JSON Schema
// validation expects (map[string]any, []any, string, int64, float64, bool,
// nil) plus the position of every value and of every mapping key, by JSON
// pointer, so that schema errors can point into the file.
type document struct {
	file   string
	value  any
	pos    map[string]position
	keyPos map[string]position
}

// maxDepth bounds nesting so a hostile file (or an alias cycle) cannot
// exhaust the stack; a real config is two levels deep.
const maxDepth = 64

// parseDocument parses YAML or JSON, chosen by extension. JSON is parsed
// twice: strictly by encoding/json for its syntax errors, then by yaml.v3,
// which accepts JSON and records positions.
func parseDocument(path string, data []byte) (*document, []Problem) {
	d := &document{file: path, pos: map[string]position{}, keyPos: map[string]position{}}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
	case ".json":
		if p, ok := jsonSyntaxProblem(path, data); !ok {
			return nil, []Problem{p}
		}
	default:
		return nil, []Problem{{File: path, Message: fmt.Sprintf("unsupported config file extension %q: use .yaml, .yml or .json", ext)}}
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			// An empty (or comments-only) file sets nothing.
			d.value = map[string]any{}
			return d, nil
		}
		return nil, []Problem{yamlSyntaxProblem(path, err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, []Problem{{File: path, Line: extra.Line, Column: extra.Column, Message: "a config file holds one YAML document; found a second one"}}
	case !errors.Is(err, io.EOF):
		return nil, []Problem{yamlSyntaxProblem(path, err)}
	}

	var problems []Problem
	d.value = d.convert(&root, "", 0, &problems)
	if len(problems) > 0 {
		return nil, problems
	}
	return d, nil
}

// yamlLineRE matches yaml.v3's syntax errors, which carry a line but no column.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserErrors are the messages of yaml.v3's parser (as opposed to its
// scanner). For these yaml.v3 prints the 0-based line of the construct being
// parsed, so one is added to get the line an editor shows; the scanner's
// lines are already 1-based.
var yamlParserErrors = []string{
	"did not find expected <",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ",
	"found undefined tag handle",
	"found duplicate %",
	"found incompatible YAML document",
}

func yamlSyntaxProblem(path string, err error) Problem {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, prefix := range yamlParserErrors {
			if strings.HasPrefix(m[2], prefix) {
				line++
				break
			}
		}
		return Problem{File: path, Line: line, Message: "invalid YAML: " + m[2]}
	}
	return Problem{File: path, Message: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// jsonSyntaxProblem reports the first JSON syntax error with the line and
// column of its byte offset; ok is true when data is one valid JSON value.
func jsonSyntaxProblem(path string, data []byte) (Problem, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, err2 := dec.Token(); !errors.Is(err2, io.EOF) {
			line, col := lineCol(data, dec.InputOffset())
			return Problem{File: path, Line: line, Column: col, Message: "invalid JSON: unexpected data after the top-level value"}, false
		}
		return Problem{}, true
	}
	if errors.Is(err, io.EOF) {
		return Problem{File: path, Line: 1, Column: 1, Message: "invalid JSON: the file is empty; write {} for no settings"}, false
	}
	offset := int64(len(data))
	var se *json.SyntaxError
	if errors.As(err, &se) {
		offset = se.Offset
	}
	line, col := lineCol(data, offset)
	return Problem{File: path, Line: line, Column: col, Message: "invalid JSON: " + err.Error()}, false
}

// lineCol turns a byte offset into a 1-based line and column (in runes).
func lineCol(data []byte, offset int64) (int, int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	col := len([]rune(string(before[lineStart:])))
	if col == 0 {
		col = 1
	}
	return line, col
}

// convert turns a yaml node into a JSON-shaped value, recording positions.
// Duplicate keys and non-scalar keys are problems here because no schema can
// see them once the value is a Go map.
func (d *document) convert(n *yaml.Node, ptr string, depth int, problems *[]Problem) any {
	if depth > maxDepth {
		*problems = append(*problems, Problem{File: d.file, Line: n.Line, Column: n.Column, Pointer: ptr, Message: "nested too deeply"})
		return nil
	}
	if n.Kind != yaml.DocumentNode {
		d.pos[ptr] = position{n.Line, n.Column}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return map[string]any{}
		}
		return d.convert(n.Content[0], ptr, depth+1, problems)
	case yaml.AliasNode:
		v := d.convert(n.Alias, ptr, depth+1, problems)
		// Point at the alias the user wrote, not at the anchor.
		d.pos[ptr] = position{n.Line, n.Column}
		return v
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = d.convert(c, ptr+"/"+strconv.Itoa(i), depth+1, problems)
		}
		return out
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				*problems = append(*problems, Problem{File: d.file, Line: k.Line, Column: k.Column, Pointer: ptr, Message: "a key must be a plain string"})
				continue
			}
			child := ptr + "/" + escapePointer(k.Value)
			if first, dup := d.keyPos[child]; dup {
				*problems = append(*problems, Problem{File: d.file, Line: k.Line, Column: k.Column, Pointer: child,
					Message: fmt.Sprintf("duplicate key %q (first set at line %d)", k.Value, first.line)})
				continue
			}
			d.keyPos[child] = position{k.Line, k.Column}
			out[k.Value] = d.convert(v, child, depth+1, problems)
		}
		return out
	default:
		return scalarValue(n)
	}
}

// scalarValue types a scalar by its resolved YAML tag, as JSON would.
// Timestamps and other YAML-only types stay strings: JSON has no such type.
func scalarValue(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	}
	return n.Value
}

func escapePointer(tok string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}

// validate runs the schema, then the semantic checks on the values the
// schema accepted, and returns every problem in file order.
func (d *document) validate() []Problem {
	problems := d.schemaProblems()
	if m, ok := d.value.(map[string]any); ok {
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
				p := d.pos[ptr]
				problems = append(problems, Problem{File: d.file, Line: p.line, Column: p.col, Pointer: ptr, Message: err.Error()})
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		a, b := problems[i], problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Message < b.Message
	})
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
	m, _ := d.value.(map[string]any)
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
