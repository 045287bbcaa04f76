package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// The hand-written encoder makes exactly encoding/json's bytes (without
// HTML escaping), for every shape of id, kind, time and data it may meet.
func TestAppendSessionUpdate(t *testing.T) {
	ts := []time.Time{
		time.Date(2026, 11, 24, 2, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 24, 2, 30, 0, 123456789, time.UTC),
		time.Date(2026, 11, 24, 2, 30, 0, 120000000, time.FixedZone("x", 3600)),
	}
	cases := []struct{ id, kind, data string }{
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", KindTerminalOutput, `{"text":"hello\nworld"}`},
		{"s", KindAgentMessage, `{"text":"<b>&amp;</b> \u00e9 é \"q\""}`},
		{"s\"x<y>&z", "kind\twith\nodd é \u2028", `"just a string"`},
		{"s", KindStatus, "{ \"status\" : \"running\",\n \"reason\":\"a b\" }"},
		{"s", KindStatus, `null`},
		{"s", KindStatus, ``},
		{"s", KindStatus, `[1, 2 ,3]`},
		{"s", KindStatus, `{"text":"tab\there, space here"}`},
	}
	for _, c := range cases {
		for _, tm := range ts {
			u := SessionUpdate{Type: TypeSessionUpdate, SessionID: c.id, Seq: 42, TS: tm, Kind: c.kind, Data: json.RawMessage(c.data)}
			if c.data == "" {
				u.Data = nil
			}
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(u); err != nil {
				t.Fatal(err)
			}
			want := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
			got := AppendSessionUpdate([]byte("prefix"), c.id, 42, tm, c.kind, u.Data)
			if !bytes.Equal(got[len("prefix"):], want) {
				t.Errorf("case %+v at %v:\n got %s\nwant %s", c, tm, got[len("prefix"):], want)
			}
			if bytes.IndexByte(got, '\n') >= 0 {
				t.Errorf("case %+v: the frame holds a newline", c)
			}
		}
	}
}

// A session-updates frame built from the head and encoded updates decodes
// to the updates, whatever the session id holds.
func TestAppendSessionUpdatesHead(t *testing.T) {
	for _, id := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", `odd "id" \ é`} {
		ts := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
		buf := AppendSessionUpdatesHead(nil, id)
		buf = AppendSessionUpdate(buf, id, 1, ts, KindAgentMessage, json.RawMessage(`{"text":"a"}`))
		buf = append(buf, ',')
		buf = AppendSessionUpdate(buf, id, 2, ts, KindAgentMessage, json.RawMessage(`{"text":"b"}`))
		buf = append(buf, "]}"...)
		var b SessionUpdates
		if err := json.Unmarshal(buf, &b); err != nil || b.Type != TypeSessionUpdates || b.SessionID != id || len(b.Updates) != 2 {
			t.Fatalf("%s: %v %+v", buf, err, b)
		}
	}
}

func TestTerminalOutputBytes(t *testing.T) {
	raw := []byte{0xff, 'a', 0x00, '\n'}
	for _, c := range []struct {
		in   TerminalOutput
		want []byte
	}{
		{TerminalOutput{Text: "héllo\n"}, []byte("héllo\n")},
		{TerminalOutput{Base64: base64.StdEncoding.EncodeToString(raw)}, raw},
		{TerminalOutput{}, []byte{}},
	} {
		got, err := c.in.Bytes()
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%+v: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := (TerminalOutput{Base64: "not base64!"}).Bytes(); err == nil {
		t.Error("forged base64 decoded without an error")
	}
}
