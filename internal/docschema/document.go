// Package docschema turns a YAML or JSON file into a JSON-shaped value that
// remembers where each value and key was written, and validates it against
// an embedded JSON Schema, reporting every mistake as a located Problem
// ("file:line:col: pointer: message") that editors can jump to.
package docschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Problem is one error in a document and where it is.
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

// Sort orders problems by position, then message, so output is stable and
// reads top to bottom like the file.
func Sort(problems []Problem) {
	sort.SliceStable(problems, func(i, j int) bool {
		a, b := problems[i], problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Message < b.Message
	})
}

// Position is a 1-based line and column in the file; zero when unknown.
type Position struct{ Line, Column int }

// Document is a parsed file: its value in the shape JSON Schema validation
// expects (map[string]any, []any, string, int64, float64, bool, nil) plus
// the position of every value and of every mapping key, by JSON pointer.
type Document struct {
	File   string
	Value  any
	pos    map[string]Position
	keyPos map[string]Position

	// aliasValues counts the values produced by expanding aliases; alias
	// names the outermost alias being expanded, for the problem.
	aliasValues int
	alias       *yaml.Node
	exhausted   bool
}

// Pos is where the value at the JSON pointer ptr was written.
func (d *Document) Pos(ptr string) Position { return d.pos[ptr] }

// KeyPos is where the mapping key whose value is at ptr was written.
func (d *Document) KeyPos(ptr string) Position { return d.keyPos[ptr] }

// Problem builds a problem located at the value at ptr.
func (d *Document) Problem(ptr, message string) Problem {
	p := d.pos[ptr]
	return Problem{File: d.File, Line: p.Line, Column: p.Column, Pointer: ptr, Message: message}
}

// maxDepth bounds nesting so a hostile file (or an alias cycle) cannot
// exhaust the stack; real documents are a few levels deep.
const maxDepth = 64

// MaxAliasValues bounds how many values alias expansion may produce in one
// document. Anchors and aliases share a few lists in real files; nested
// aliases ("billion laughs") grow exponentially, and a file of a few hundred
// bytes would otherwise expand to gigabytes.
const MaxAliasValues = 10000

// ParseYAML parses one YAML document. An empty (or comments-only) file is an
// empty mapping. Syntax errors, duplicate keys, non-string keys and a second
// document are problems, since no schema could see them afterwards.
func ParseYAML(file string, data []byte) (*Document, []Problem) {
	d := &Document{File: file, pos: map[string]Position{}, keyPos: map[string]Position{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			d.Value = map[string]any{}
			return d, nil
		}
		return nil, []Problem{yamlSyntaxProblem(file, err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, []Problem{{File: file, Line: extra.Line, Column: extra.Column, Message: "the file holds more than one YAML document; found a second one"}}
	case !errors.Is(err, io.EOF):
		return nil, []Problem{yamlSyntaxProblem(file, err)}
	}
	var problems []Problem
	d.Value = d.convert(&root, "", 0, &problems)
	if len(problems) > 0 {
		return nil, problems
	}
	return d, nil
}

// ParseJSON parses a JSON file: strictly by encoding/json for its syntax
// errors, then by yaml.v3 (JSON is YAML) for positions.
func ParseJSON(file string, data []byte) (*Document, []Problem) {
	if p, ok := jsonSyntaxProblem(file, data); !ok {
		return nil, []Problem{p}
	}
	return ParseYAML(file, data)
}

// yamlLineRE matches yaml.v3's syntax errors, which carry a line but no column.
var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): (.*)$`) })

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

func yamlSyntaxProblem(file string, err error) Problem {
	msg := err.Error()
	if m := yamlLineRE().FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, prefix := range yamlParserErrors {
			if strings.HasPrefix(m[2], prefix) {
				line++
				break
			}
		}
		return Problem{File: file, Line: line, Message: "invalid YAML: " + m[2]}
	}
	return Problem{File: file, Message: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// jsonSyntaxProblem reports the first JSON syntax error with the line and
// column of its byte offset; ok is true when data is one valid JSON value.
func jsonSyntaxProblem(file string, data []byte) (Problem, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, err2 := dec.Token(); !errors.Is(err2, io.EOF) {
			line, col := lineCol(data, dec.InputOffset())
			return Problem{File: file, Line: line, Column: col, Message: "invalid JSON: unexpected data after the top-level value"}, false
		}
		return Problem{}, true
	}
	if errors.Is(err, io.EOF) {
		return Problem{File: file, Line: 1, Column: 1, Message: "invalid JSON: the file is empty; write {} for an empty document"}, false
	}
	offset := int64(len(data))
	var se *json.SyntaxError
	if errors.As(err, &se) {
		offset = se.Offset
	}
	line, col := lineCol(data, offset)
	return Problem{File: file, Line: line, Column: col, Message: "invalid JSON: " + err.Error()}, false
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
func (d *Document) convert(n *yaml.Node, ptr string, depth int, problems *[]Problem) any {
	if d.exhausted {
		return nil
	}
	if d.alias != nil {
		d.aliasValues++
		if d.aliasValues > MaxAliasValues {
			d.exhausted = true
			*problems = append(*problems, Problem{File: d.File, Line: d.alias.Line, Column: d.alias.Column, Pointer: ptr,
				Message: fmt.Sprintf("aliases expand to more than %d values; reeve refuses documents built to exhaust memory", MaxAliasValues)})
			return nil
		}
	}
	if depth > maxDepth {
		*problems = append(*problems, Problem{File: d.File, Line: n.Line, Column: n.Column, Pointer: ptr, Message: "nested too deeply"})
		return nil
	}
	if n.Kind != yaml.DocumentNode {
		d.pos[ptr] = Position{n.Line, n.Column}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return map[string]any{}
		}
		return d.convert(n.Content[0], ptr, depth+1, problems)
	case yaml.AliasNode:
		if d.alias == nil {
			d.alias = n
			defer func() { d.alias = nil }()
		}
		v := d.convert(n.Alias, ptr, depth+1, problems)
		// Point at the alias the user wrote, not at the anchor.
		d.pos[ptr] = Position{n.Line, n.Column}
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
				*problems = append(*problems, Problem{File: d.File, Line: k.Line, Column: k.Column, Pointer: ptr, Message: "a key must be a plain string"})
				continue
			}
			child := ptr + "/" + EscapePointer(k.Value)
			if first, dup := d.keyPos[child]; dup {
				*problems = append(*problems, Problem{File: d.File, Line: k.Line, Column: k.Column, Pointer: child,
					Message: fmt.Sprintf("duplicate key %q (first set at line %d)", k.Value, first.Line)})
				continue
			}
			d.keyPos[child] = Position{k.Line, k.Column}
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

// EscapePointer escapes one JSON pointer token (RFC 6901).
func EscapePointer(tok string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}
