package relay

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeEnvelope compares the relay's envelope scanner with
// encoding/json: whatever encoding/json reads as an envelope, the scanner
// reads the same (type, channel, reason and the payload's value), and it
// never panics on anything. (The scanner may accept a payload encoding/json
// refuses: the relay does not look inside p; the ends do.)
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"t":"data","p":"abc"}`,
		` { "p" : "a\"b\\" , "ch":"1.x", "t" : "data" } `,
		`{"t":"close","reason":"caf\u00e9"}`,
		`{"t":"data","ch":"1.x","p":"\\\"in\\\""}`,
		`{"T":"data"}`,
		`{"t":"data","p":null}`,
		`{"t":"data","t":"close"}`,
		`{"t":"da\xffta"}`,
		`{}`, `null`, `[]`, `{"p":1}`, `{"t":"data","p":"x"}garbage`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		var want struct {
			Type    string  `json:"t"`
			Channel string  `json:"ch"`
			Reason  string  `json:"reason"`
			Payload *string `json:"p"`
		}
		if json.Unmarshal(b, &want) != nil {
			return
		}
		if err != nil {
			t.Fatalf("%q: encoding/json reads an envelope, the scanner refuses it: %v", b, err)
		}
		if e.Type != want.Type || e.Channel != want.Channel || e.Reason != want.Reason {
			t.Fatalf("%q: scanner read t=%q ch=%q reason=%q, encoding/json t=%q ch=%q reason=%q",
				b, e.Type, e.Channel, e.Reason, want.Type, want.Channel, want.Reason)
		}
		switch {
		case want.Payload == nil && e.Payload != nil:
			t.Fatalf("%q: scanner found a payload %q that encoding/json does not", b, e.Payload)
		case want.Payload != nil:
			var got string
			if e.Payload == nil || json.Unmarshal(e.Payload, &got) != nil || got != *want.Payload {
				t.Fatalf("%q: scanner's payload %q, encoding/json's %q", b, e.Payload, *want.Payload)
			}
		}
	})
}
