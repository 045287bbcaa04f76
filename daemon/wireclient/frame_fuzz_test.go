package wireclient

import (
	"bytes"
	"encoding/json"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

// FuzzFrameType compares the fast reading of a frame's type with
// encoding/json. A frame naming "type" twice is the one known difference
// (the fast path takes the first, encoding/json the last); the daemon
// never writes one, and dispatch then decodes the frame as the type the
// fast path read, which fails or is skipped.
func FuzzFrameType(f *testing.F) {
	for _, s := range []string{
		`{"type":"ack","id":"1","ok":true}`,
		`{"type":"session-update","session_id":"s","seq":1}`,
		`{"type":"a\"b"}`, `{"type":"a\u0062"}`, `{ "type":"ack"}`, `{"Type":"ack"}`,
		`{"type":"\xff"}`, `{"type":"ack"`, `{"type":1}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := frameType(b)
		var env wire.Envelope
		if json.Unmarshal(b, &env) != nil {
			return
		}
		if bytes.Count(b, []byte(`"type"`)) > 1 || bytes.Count(bytes.ToLower(b), []byte(`"type"`)) > 1 {
			return
		}
		if got != env.Type {
			t.Fatalf("%q: frameType %q, encoding/json %q", b, got, env.Type)
		}
	})
}
