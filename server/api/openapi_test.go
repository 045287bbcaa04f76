package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"reeve.dev/reeve/server/openapi"
)

var update = flag.Bool("update", false, "rewrite server/openapi/openapi.json from the route table")

// TestCommittedOpenAPIIsCurrent fails when the committed document lags the
// route table. Regenerate with `go generate ./server/api`.
func TestCommittedOpenAPIIsCurrent(t *testing.T) {
	doc, err := Document(Routes())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "openapi", "openapi.json"), doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(doc, openapi.Document) {
		t.Fatalf("server/openapi/openapi.json lags the route table; run `go generate ./server/api` and commit the result")
	}
	var parsed map[string]any
	if err := json.Unmarshal(openapi.Document, &parsed); err != nil {
		t.Fatalf("committed document is not JSON: %v", err)
	}
	if parsed["openapi"] != "3.1.0" || parsed["x-generated"] != Generated {
		t.Fatalf("committed document lacks its version or provenance")
	}
}

// Every tag of the route table is described: the linter refuses an empty
// tag description, and this finds it without the linter's install.
func TestEveryTagIsDescribed(t *testing.T) {
	for _, r := range Routes() {
		if tagDescriptions[r.Tag] == "" {
			t.Errorf("tag %q (of %s %s) has no description in tagDescriptions", r.Tag, r.Method, r.Path)
		}
	}
}
