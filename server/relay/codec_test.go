package relay

import (
	"strings"
	"testing"
)

func TestDecodeEnvelope(t *testing.T) {
	cases := []struct {
		in      string
		typ, ch string
		reason  string
		p       string // raw, quotes included
		bad     bool
	}{
		{in: `{"t":"data","p":"abc"}`, typ: "data", p: `"abc"`},
		{in: ` { "p" : "a\"b\\" , "ch":"1.x", "t" : "data" } `, typ: "data", ch: "1.x", p: `"a\"b\\"`},
		{in: `{"t":"data","p":"ends in \\\\"}`, typ: "data", p: `"ends in \\\\"`},
		{in: `{"t":"data","p":"\\\"still inside\\\""}`, typ: "data", p: `"\\\"still inside\\\""`},
		{in: `{"t":"close","reason":"caf\u00e9"}`, typ: "close", reason: "café"}, // escapes: the slow path
		{in: `{"t":"data","p":null}`, typ: "data"},
		{in: `{"t":"data","p":"x","extra":1}`, typ: "data", p: `"x"`},
		{in: `{}`},
		{in: `{"t":"data","p":{"x":1}}`, bad: true},
		{in: `{"t":"data","p":12}`, bad: true},
		{in: `{"t":"data","p":"unterminated}`, bad: true},
		{in: `["t","data"]`, bad: true},
		{in: `{"t":"data"} trailing`, bad: true},
		{in: ``, bad: true},
	}
	for _, tc := range cases {
		e, err := decodeEnvelope([]byte(tc.in))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: decoded as %+v, want an error", tc.in, e)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if e.Type != tc.typ || e.Channel != tc.ch || e.Reason != tc.reason || string(e.Payload) != tc.p {
			t.Errorf("%s: got t=%q ch=%q reason=%q p=%s", tc.in, e.Type, e.Channel, e.Reason, e.Payload)
		}
	}
}

func TestFramesAndBusPayloads(t *testing.T) {
	raw := []byte(`"x\"y\u00e9"`)
	if got := string(frameDaemonData("7.ab", raw)); got != `{"t":"data","ch":"7.ab","p":"x\"y\u00e9"}` {
		t.Errorf("daemon frame %s", got)
	}
	if got := string(frameClientData(raw)); got != `{"t":"data","p":"x\"y\u00e9"}` {
		t.Errorf("client frame %s", got)
	}
	if got := string(frameEnd("error", "", `a "quoted" <reason>`)); got != `{"t":"error","reason":"a \"quoted\" <reason>"}` {
		t.Errorf("end frame %s", got)
	}
	// Across the bus the payload keeps its value.
	s := payloadString(raw)
	if s != "x\"yé" {
		t.Errorf("bus value %q", s)
	}
	if e, err := decodeEnvelope(frameClientData(rawPayload(s))); err != nil || payloadString(e.Payload) != s {
		t.Errorf("round trip: %v %q", err, e.Payload)
	}
	plain := strings.Repeat("QUJD", 64)
	if got := string(rawPayload(payloadString([]byte(`"` + plain + `"`)))); got != `"`+plain+`"` {
		t.Errorf("base64 across the bus: %s", got)
	}
}
