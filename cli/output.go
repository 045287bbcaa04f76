package cli

import (
	"encoding/json"
	"fmt"
	"io"
)

// writeJSON prints v as indented JSON followed by a newline: the stable
// machine-readable form of every read command.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// writeJSONLine prints v as one line of JSON: the streaming form.
func writeJSONLine(w io.Writer, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
