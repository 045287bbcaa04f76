// Package jsonschema validates JSON values against the part of JSON Schema
// 2020-12 that reeve's own schemas use: type, const, enum, properties,
// additionalProperties, required, items, allOf, anyOf, oneOf, not, local $ref
// (a JSON pointer into the same document, such as "#/$defs/x"), string and
// array lengths, uniqueItems, numeric bounds and pattern. format, $schema, $id,
// $defs, title, description, default and examples are annotations.
//
// Compile refuses any other keyword, so a schema can never silently skip a
// rule this package does not know. It exists because a general library
// compiled the metaschemas of five drafts in its package init, which every
// command of the binary paid for on start-up (about 1.7 MB and 21k
// allocations); here nothing happens before Compile.
//
// A value is what encoding/json decodes into any (with or without UseNumber),
// with int, int64 and float64 accepted as numbers too.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Schema is a compiled schema: a node of a document compiled as a whole.
type Schema struct {
	doc  *document
	node map[string]any
	ptr  string // where node sits in the document, "" for the root
}

// document is a compiled root and what its nodes share.
type document struct {
	root     any
	patterns map[string]*regexp.Regexp
}

// annotations are keywords that never fail a value.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "$comment": true, "format": true,
	"title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// assertions are the keywords Validate checks.
var assertions = map[string]bool{
	"type": true, "const": true, "enum": true, "properties": true,
	"additionalProperties": true, "required": true, "items": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "$ref": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true,
	"uniqueItems": true, "minimum": true, "maximum": true, "pattern": true,
}

// Compile checks a whole schema document (decoded JSON) and returns its root.
// Every keyword must be known, every $ref must resolve and every pattern
// compile.
func Compile(root any) (*Schema, error) {
	d := &document{root: root, patterns: map[string]*regexp.Regexp{}}
	if err := d.check(root, ""); err != nil {
		return nil, err
	}
	return d.at("")
}

// CompileJSON is Compile of a JSON text.
func CompileJSON(src []byte) (*Schema, error) {
	root, err := Decode(src)
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	return Compile(root)
}

// Decode decodes one JSON value with numbers as json.Number, so integers
// keep every digit, and refuses anything after it.
func Decode(src []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if off := dec.InputOffset(); len(bytes.TrimSpace(src[off:])) > 0 {
		return nil, fmt.Errorf("invalid character after the top-level value at offset %d", off)
	}
	return v, nil
}

// Sub returns the schema at a JSON pointer fragment of s's document, such as
// "#/components/schemas/Name".
func (s *Schema) Sub(ref string) (*Schema, error) {
	return s.doc.at(strings.TrimPrefix(ref, "#"))
}

func (d *document) at(ptr string) (*Schema, error) {
	v, ok := lookup(d.root, ptr)
	if !ok {
		return nil, fmt.Errorf("no schema at #%s", ptr)
	}
	switch n := v.(type) {
	case map[string]any:
		return &Schema{doc: d, node: n, ptr: ptr}, nil
	case bool:
		if n {
			return &Schema{doc: d, node: map[string]any{}, ptr: ptr}, nil
		}
		return &Schema{doc: d, node: map[string]any{"not": map[string]any{}}, ptr: ptr}, nil
	}
	return nil, fmt.Errorf("#%s: %T is not a schema", ptr, v)
}

// check walks the schema at ptr.
func (d *document) check(v any, ptr string) error {
	n, ok := v.(map[string]any)
	if !ok {
		if _, ok := v.(bool); ok {
			return nil
		}
		return fmt.Errorf("#%s: %T is not a schema", ptr, v)
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := n[k]
		at := ptr + "/" + escape(k)
		if !assertions[k] && !annotations[k] {
			// The root may be a container laid out like an OpenAPI document
			// ({"components": {"schemas": {...}}}): its other members hold
			// schemas and are checked as such. Anywhere else an unknown key
			// is a keyword this package would ignore, which must not pass.
			if _, isMap := val.(map[string]any); isMap && !looksLikeSchema(n) {
				switch ptr {
				case "":
					if err := d.check(val, at); err != nil {
						return err
					}
					continue
				case "/components":
					if err := d.checkContainer(val, at); err != nil {
						return err
					}
					continue
				}
			}
			return fmt.Errorf("#%s: keyword %q is not supported", ptr, k)
		}
		var err error
		switch k {
		case "$defs":
			err = d.checkContainer(val, at)
		case "properties":
			err = d.checkContainer(val, at)
		case "items", "not", "additionalProperties":
			err = d.check(val, at)
		case "allOf", "anyOf", "oneOf":
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return fmt.Errorf("#%s: want a non-empty array", at)
			}
			for i, e := range list {
				if err := d.check(e, at+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		case "$ref":
			r, _ := val.(string)
			if !strings.HasPrefix(r, "#") {
				return fmt.Errorf("#%s: only local references are supported, got %q", at, r)
			}
			target, ok := lookup(d.root, r[1:])
			if !ok {
				return fmt.Errorf("#%s: unresolved reference %q", at, r)
			}
			_, isMap := target.(map[string]any)
			_, isBool := target.(bool)
			if !isMap && !isBool {
				return fmt.Errorf("#%s: reference %q is not a schema", at, r)
			}
		case "pattern":
			src, ok := val.(string)
			if !ok {
				return fmt.Errorf("#%s: want a string", at)
			}
			re, perr := regexp.Compile(src)
			if perr != nil {
				return fmt.Errorf("#%s: %w", at, perr)
			}
			d.patterns[src] = re
		case "required":
			list, ok := val.([]any)
			if !ok {
				return fmt.Errorf("#%s: want an array of names", at)
			}
			for _, e := range list {
				if _, ok := e.(string); !ok {
					return fmt.Errorf("#%s: want an array of names", at)
				}
			}
		case "type":
			if len(typeList(val)) == 0 {
				return fmt.Errorf("#%s: want a type name or an array of them", at)
			}
		case "enum":
			if _, ok := val.([]any); !ok {
				return fmt.Errorf("#%s: want an array", at)
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			if _, ok := toInt(val); !ok {
				return fmt.Errorf("#%s: want an integer", at)
			}
		case "minimum", "maximum":
			if _, ok := toRat(val); !ok {
				return fmt.Errorf("#%s: want a number", at)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// looksLikeSchema tells a schema node from a plain container of schemas.
func looksLikeSchema(n map[string]any) bool {
	for k := range n {
		if assertions[k] {
			return true
		}
	}
	return false
}

// checkContainer checks each member of an object of schemas.
func (d *document) checkContainer(v any, ptr string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("#%s: want an object", ptr)
	}
	for k, e := range m {
		if err := d.check(e, ptr+"/"+escape(k)); err != nil {
			return err
		}
	}
	return nil
}

// Error is one failure of a value. Composite keywords (anyOf, oneOf) carry
// the failures of each branch.
type Error struct {
	// Path is the value's location: the keys and indexes leading to it.
	Path []string
	// Keyword is the failing keyword: "type", "required", "additionalProperties", ...
	Keyword string
	// Got and Want are the value and what the keyword asked for, where that
	// makes sense (const, enum, type, bounds, lengths).
	Got, Want any
	// Names are the missing keys of "required" and the unknown keys of
	// "additionalProperties".
	Names []string
	// Branches are the failures of each branch of an anyOf or oneOf, in
	// order (empty for a branch that passed), and Schemas the branches.
	Branches [][]*Error
	Schemas  []any
	// Message is the failure in English.
	Message string
}

// Pointer is Path as a JSON pointer ("" for the root).
func (e *Error) Pointer() string {
	var b strings.Builder
	for _, t := range e.Path {
		b.WriteByte('/')
		b.WriteString(escape(t))
	}
	return b.String()
}

func (e *Error) Error() string {
	if p := e.Pointer(); p != "" {
		return p + ": " + e.Message
	}
	return e.Message
}

// Validate checks v and returns every failure, nil when v is valid.
func (s *Schema) Validate(v any) []*Error {
	var out []*Error
	s.doc.validate(s.node, v, nil, &out, 0)
	return out
}

// maxDepth bounds $ref recursion, so a schema that refers to itself without
// consuming the value cannot loop.
const maxDepth = 256

func (d *document) validate(node any, v any, path []string, out *[]*Error, depth int) {
	n, ok := node.(map[string]any)
	if !ok {
		if b, _ := node.(bool); !b {
			*out = append(*out, &Error{Path: clonePath(path), Keyword: "false", Message: "no value is allowed here"})
		}
		return
	}
	if depth > maxDepth {
		*out = append(*out, &Error{Path: clonePath(path), Keyword: "$ref", Message: "schema references nest too deeply"})
		return
	}
	fail := func(e *Error) {
		e.Path = clonePath(path)
		*out = append(*out, e)
	}
	if r, ok := n["$ref"].(string); ok {
		target, _ := lookup(d.root, r[1:])
		d.validate(target, v, path, out, depth+1)
	}
	if t, ok := n["type"]; ok {
		want := typeList(t)
		got := TypeOf(v)
		if !typeMatches(got, want) {
			if got == "integer" {
				got = "number"
			}
			sorted := slices.Sorted(slices.Values(want))
			fail(&Error{Keyword: "type", Got: got, Want: want, Message: fmt.Sprintf("got %s, want %s", got, strings.Join(sorted, " or "))})
			return // every other keyword would only restate the mismatch
		}
	}
	if c, ok := n["const"]; ok && !Equal(c, v) {
		fail(&Error{Keyword: "const", Got: v, Want: c, Message: fmt.Sprintf("value must be %s, got %s", Text(c), Text(v))})
	}
	if list, ok := n["enum"].([]any); ok {
		found := false
		for _, e := range list {
			if Equal(e, v) {
				found = true
				break
			}
		}
		if !found {
			want := make([]string, len(list))
			for i, e := range list {
				want[i] = Text(e)
			}
			fail(&Error{Keyword: "enum", Got: v, Want: list, Message: fmt.Sprintf("value must be one of %s, got %s", strings.Join(want, ", "), Text(v))})
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		list, ok := n[k].([]any)
		if !ok {
			continue
		}
		branches := make([][]*Error, len(list))
		passed := 0
		for i, b := range list {
			var errs []*Error
			d.validate(b, v, path, &errs, depth+1)
			branches[i] = errs
			if len(errs) == 0 {
				passed++
			}
		}
		switch {
		case k == "allOf":
			for _, errs := range branches {
				*out = append(*out, errs...)
			}
		case k == "anyOf" && passed == 0:
			fail(&Error{Keyword: k, Branches: branches, Schemas: list, Message: "matches none of the alternatives"})
		case k == "oneOf" && passed == 0:
			fail(&Error{Keyword: k, Branches: branches, Schemas: list, Message: "matches none of the alternatives"})
		case k == "oneOf" && passed > 1:
			fail(&Error{Keyword: k, Branches: branches, Schemas: list, Message: fmt.Sprintf("matches %d alternatives, want exactly one", passed)})
		}
	}
	if not, ok := n["not"]; ok {
		var errs []*Error
		d.validate(not, v, path, &errs, depth+1)
		if len(errs) == 0 {
			fail(&Error{Keyword: "not", Message: "must not match the schema under not"})
		}
	}
	switch x := v.(type) {
	case string:
		l := utf8.RuneCountInString(x)
		if m, ok := toInt(n["minLength"]); ok && l < m {
			fail(&Error{Keyword: "minLength", Got: l, Want: m, Message: fmt.Sprintf("minLength: got %d, want %d", l, m)})
		}
		if m, ok := toInt(n["maxLength"]); ok && l > m {
			fail(&Error{Keyword: "maxLength", Got: l, Want: m, Message: fmt.Sprintf("maxLength: got %d, want %d", l, m)})
		}
		if p, ok := n["pattern"].(string); ok && !d.patterns[p].MatchString(x) {
			fail(&Error{Keyword: "pattern", Got: x, Want: p, Message: fmt.Sprintf("%s does not match pattern %s", Text(x), Text(p))})
		}
	case []any:
		if m, ok := toInt(n["minItems"]); ok && len(x) < m {
			fail(&Error{Keyword: "minItems", Got: len(x), Want: m, Message: fmt.Sprintf("minItems: got %d, want %d", len(x), m)})
		}
		if m, ok := toInt(n["maxItems"]); ok && len(x) > m {
			fail(&Error{Keyword: "maxItems", Got: len(x), Want: m, Message: fmt.Sprintf("maxItems: got %d, want %d", len(x), m)})
		}
		if u, _ := n["uniqueItems"].(bool); u {
		unique:
			for i := range x {
				for j := i + 1; j < len(x); j++ {
					if Equal(x[i], x[j]) {
						fail(&Error{Keyword: "uniqueItems", Message: fmt.Sprintf("items at %d and %d are equal", i, j)})
						break unique
					}
				}
			}
		}
		if items, ok := n["items"]; ok {
			for i, e := range x {
				d.validate(items, e, append(path, strconv.Itoa(i)), out, depth+1)
			}
		}
	case map[string]any:
		if req, ok := n["required"].([]any); ok {
			var missing []string
			for _, r := range req {
				if _, present := x[r.(string)]; !present {
					missing = append(missing, r.(string))
				}
			}
			if len(missing) > 0 {
				quoted := make([]string, len(missing))
				for i, m := range missing {
					quoted[i] = strconv.Quote(m)
				}
				fail(&Error{Keyword: "required", Names: missing, Message: "missing required key " + strings.Join(quoted, ", ")})
			}
		}
		props, _ := n["properties"].(map[string]any)
		extra, hasExtra := n["additionalProperties"]
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var unknown []string
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				d.validate(ps, x[k], append(path, k), out, depth+1)
				continue
			}
			if !hasExtra {
				continue
			}
			if b, isBool := extra.(bool); isBool {
				if !b {
					unknown = append(unknown, k)
				}
				continue
			}
			d.validate(extra, x[k], append(path, k), out, depth+1)
		}
		if len(unknown) > 0 {
			quoted := make([]string, len(unknown))
			for i, m := range unknown {
				quoted[i] = strconv.Quote(m)
			}
			fail(&Error{Keyword: "additionalProperties", Names: unknown, Message: "unknown key " + strings.Join(quoted, ", ")})
		}
	default:
		if r, ok := toRat(v); ok {
			if m, ok := toRat(n["minimum"]); ok && r.Cmp(m) < 0 {
				fail(&Error{Keyword: "minimum", Got: v, Want: n["minimum"], Message: fmt.Sprintf("value must be at least %s, got %s", m.RatString(), r.RatString())})
			}
			if m, ok := toRat(n["maximum"]); ok && r.Cmp(m) > 0 {
				fail(&Error{Keyword: "maximum", Got: v, Want: n["maximum"], Message: fmt.Sprintf("maximum: got %s, want %s", r.RatString(), m.RatString())})
			}
		}
	}
}

// TypeOf names v's JSON type; a number without a fraction is "integer".
func TypeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case int, int64:
		return "integer"
	}
	if r, ok := toRat(v); ok {
		if r.IsInt() {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func typeMatches(got string, want []string) bool {
	for _, w := range want {
		if w == got || (w == "number" && got == "integer") {
			return true
		}
	}
	return false
}

func typeList(t any) []string {
	switch x := t.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	return nil
}

// Equal compares two JSON values, numbers by value (1 equals 1.0).
func Equal(a, b any) bool {
	if ra, ok := toRat(a); ok {
		rb, ok := toRat(b)
		return ok && ra.Cmp(rb) == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !Equal(e, f) {
				return false
			}
		}
		return true
	}
	return false
}

// Text renders a value as JSON, for messages.
func Text(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func toRat(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		return r, ok
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(x) == nil {
			return nil, false
		}
		return r, true
	case int:
		return new(big.Rat).SetInt64(int64(x)), true
	case int64:
		return new(big.Rat).SetInt64(x), true
	}
	return nil, false
}

func toInt(v any) (int, bool) {
	r, ok := toRat(v)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return int(r.Num().Int64()), true
}

// lookup follows a JSON pointer ("" or "/a/b") into a decoded document.
func lookup(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n := v.(type) {
		case map[string]any:
			e, ok := n[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil, false
			}
			v = n[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func clonePath(p []string) []string {
	if len(p) == 0 {
		return nil
	}
	return append([]string(nil), p...)
}
