package config

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// want is the located part of a problem; the message is matched by substring.
type want struct {
	line, col int
	pointer   string
	message   string
}

func checkProblems(t *testing.T, path string, got []Problem, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(wants), renderProblems(got))
	}
	for i, w := range wants {
		p := got[i]
		if p.File != path || p.Line != w.line || p.Column != w.col || p.Pointer != w.pointer || !strings.Contains(p.Message, w.message) {
			t.Errorf("problem %d = %s\nwant %s:%d:%d: %s: ...%s...", i, p, path, w.line, w.col, w.pointer, w.message)
		}
	}
}

func renderProblems(ps []Problem) string {
	var lines []string
	for _, p := range ps {
		lines = append(lines, "  "+p.String())
	}
	return strings.Join(lines, "\n")
}

func TestValidateFileValid(t *testing.T) {
	for name, content := range map[string]string{
		"config.yaml": "version: 1\nlisten: \"0.0.0.0:8080\"\nprofile: lan\nallowed_hosts: [a.example, b.example]\nallowed_origins:\n  - https://x.example\nauth: true\ndefault_agent: claude\nhook_timeout_seconds: 30\n",
		"config.yml":  "# only a comment\nlisten: 7070\n",
		"empty.yaml":  "",
		"config.json": `{"version": 1, "listen": "/tmp/r.sock", "profile": "relay", "auth": false, "hook_timeout_seconds": 1}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, name, content)
			problems, err := ValidateFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 0 {
				t.Fatalf("valid file reported problems:\n%s", renderProblems(problems))
			}
		})
	}
}

func TestValidateFileYAMLProblems(t *testing.T) {
	path := writeFile(t, "config.yaml", strings.Join([]string{
		"version: 1",                    // 1
		"listen: 127.0.0.1:7070",        // 2
		"profile: public",               // 3: bad enum
		"auth: \"yes\"",                 // 4: wrong type
		"colour: blue",                  // 5: unknown key
		"allowed_hosts:",                // 6
		"  - ok.example",                // 7
		"  - 42",                        // 8: wrong item type
		"hook_timeout_seconds: 0",       // 9: below minimum
		"home: /elsewhere",              // 10: not allowed in the file
		"default_agent: [claude]",       // 11: wrong type
		"allowed_origins: https://x.io", // 12: string, not a list
	}, "\n")+"\n")
	problems, err := ValidateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, path, problems, []want{
		{3, 10, "/profile", `value must be one of "local", "lan", "relay", got "public"`},
		{4, 7, "/auth", "got string, want boolean"},
		{5, 1, "/colour", `unknown key "colour"`},
		{8, 5, "/allowed_hosts/1", "got number, want string"},
		{9, 23, "/hook_timeout_seconds", "at least 1, got 0"},
		{10, 1, "/home", "use --home or REEVE_HOME"},
		{11, 16, "/default_agent", "got array, want string"},
		{12, 18, "/allowed_origins", "got string, want array"},
	})
	want := path + ":3:10: /profile: value must be one of \"local\", \"lan\", \"relay\", got \"public\""
	if got := problems[0].String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestValidateFileJSONProblems(t *testing.T) {
	path := writeFile(t, "config.json", "{\n  \"listen\": true,\n  \"profile\": \"lan\",\n  \"extra\": {\"a\": 1},\n  \"version\": 2\n}\n")
	problems, err := ValidateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, path, problems, []want{
		{2, 13, "/listen", "got boolean, want integer or string"},
		{4, 3, "/extra", `unknown key "extra"`},
		{5, 14, "/version", "value must be 1, got 2"},
	})
}

func TestValidateFileSemanticListen(t *testing.T) {
	path := writeFile(t, "config.yaml", "profile: lan\nlisten: \"host:\"\n")
	problems, err := ValidateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, path, problems, []want{{2, 9, "/listen", "port is missing"}})
}

func TestValidateFileListenAsNumber(t *testing.T) {
	path := writeFile(t, "config.yaml", "listen: 99999\n")
	problems, err := ValidateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, path, problems, []want{{1, 9, "/listen", "maximum"}})
}

func TestValidateFileSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, content string
		want          want
	}{
		// Parser errors (yaml.v3 prints their line 0-based) and scanner errors.
		{"config.yaml", "listen: 127.0.0.1:7070\nprofile: [lan\nauth: true\n", want{2, 0, "", "invalid YAML: did not find expected ',' or ']'"}},
		{"config.yaml", "auth: true\n- listen\n", want{2, 0, "", "invalid YAML: did not find expected key"}},
		{"config.yaml", "listen: a\n\tprofile: lan\n", want{2, 0, "", "invalid YAML: found a tab character"}},
		{"config.yaml", "listen: a\nprofile: @lan\n", want{2, 0, "", "invalid YAML: found character that cannot start any token"}},
		{"config.yaml", "listen: a\nprofile: lan\n  auth: true\n", want{3, 0, "", "invalid YAML: mapping values are not allowed"}},
		{"config.yaml", "auth: true\nauth: false\n", want{2, 1, "/auth", `duplicate key "auth" (first set at line 1)`}},
		{"config.yaml", "auth: true\n---\nauth: false\n", want{2, 1, "", "found a second one"}},
		{"config.json", "{\n  \"auth\": true,\n  \"listen\": \"x\"\n  \"profile\": \"lan\"\n}\n", want{4, 3, "", "invalid JSON"}},
		{"config.json", "{\"auth\": true} {}", want{1, 16, "", "unexpected data after the top-level value"}},
		{"config.json", "", want{1, 1, "", "the file is empty"}},
		{"config.toml", "auth = true\n", want{0, 0, "", `unsupported config file extension ".toml"`}},
	}
	for _, tt := range tests {
		t.Run(tt.content, func(t *testing.T) {
			path := writeFile(t, tt.name, tt.content)
			problems, err := ValidateFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkProblems(t, path, problems, []want{tt.want})
		})
	}
}

func TestValidateFileRootNotObject(t *testing.T) {
	path := writeFile(t, "config.yaml", "- listen\n- auth\n")
	problems, err := ValidateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, path, problems, []want{{1, 1, "", "got array, want object"}})
}

func TestValidateFileMissing(t *testing.T) {
	_, err := ValidateFile(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestFileErrorListsEveryProblem(t *testing.T) {
	err := &FileError{File: "c.yaml", Problems: []Problem{
		{File: "c.yaml", Line: 1, Column: 2, Pointer: "/a", Message: "one"},
		{File: "c.yaml", Line: 3, Column: 4, Pointer: "/b", Message: "two"},
	}}
	want := "config file c.yaml is invalid (2 problems):\n  c.yaml:1:2: /a: one\n  c.yaml:3:4: /b: two"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

// The schema file and the Go key table must describe the same keys, or a
// key would validate but never load (or load but never validate).
func TestSchemaMatchesSettings(t *testing.T) {
	var schema struct {
		AdditionalProperties bool                       `json:"additionalProperties"`
		Properties           map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(SchemaV1, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.AdditionalProperties {
		t.Error("schema must set additionalProperties: false")
	}
	var got []string
	for k := range schema.Properties {
		got = append(got, k)
	}
	want := []string{"version"}
	for _, s := range settings {
		want = append(want, s.key)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema properties %v, settings %v", got, want)
	}
	if _, err := compiledV1(); err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
}

// A config file built to exhaust memory is refused, located, without
// reading it all: a symbolic link to /dev/zero, and nested aliases.
func TestValidateFileRefusesExhaustion(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "config.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if _, err := ValidateFile(zero); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero: %v", err)
	}
	if _, err := loadFile(zero); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("load /dev/zero: %v", err)
	}
	var b strings.Builder
	b.WriteString("a: &a [x, x, x, x, x, x, x, x, x]\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		b.WriteString(name + ": &" + name + " [" + strings.TrimSuffix(strings.Repeat("*"+prev+", ", 9), ", ") + "]\n")
		prev = name
	}
	bomb := writeFile(t, "bomb.yaml", b.String())
	problems, err := ValidateFile(bomb)
	if err != nil || len(problems) != 1 || problems[0].Line == 0 || !strings.Contains(problems[0].Message, "aliases expand") {
		t.Fatalf("bomb: %v %v", problems, err)
	}
	var fe *FileError
	if _, err := loadFile(bomb); !errors.As(err, &fe) || !strings.Contains(err.Error(), "aliases expand") {
		t.Errorf("load bomb: %v", err)
	}
}
