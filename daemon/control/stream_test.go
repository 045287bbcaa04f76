package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// The streamed log is the session's events after after_seq up to
// until_seq, one session-update frame a line, each line exactly the frame
// a subscription sends for that event; the client copies it through and
// counts it.
func TestStreamEvents(t *testing.T) {
	f := newWSFixture(t)
	ctx := context.Background()
	in := make([]store.EventInput, 0, 2*streamPage+10)
	for i := range cap(in) {
		// Data with whitespace and HTML characters must come out compact
		// and unescaped, as on the WebSocket.
		in = append(in, store.EventInput{SessionID: f.sid, Kind: wire.KindAgentMessage, Data: json.RawMessage(fmt.Sprintf(`{ "text": "<%d>\n" }`, i))})
	}
	for off := 0; off < len(in); off += 4000 {
		if _, err := f.st.AppendMany(ctx, in[off:min(off+4000, len(in))]); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := f.st.Events(ctx, f.sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl := f.client()
	for _, r := range []struct{ after, until int64 }{{0, int64(len(in))}, {5, 9}, {streamPage - 1, streamPage + 2}, {int64(len(in)) - 3, 0}} {
		var out bytes.Buffer
		n, err := cl.StreamEvents(ctx, f.sid, r.after, r.until, &out)
		if err != nil {
			t.Fatalf("stream %+v: %v", r, err)
		}
		until := r.until
		if until == 0 {
			until = int64(len(in))
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if n != until-r.after || int64(len(lines)) != n {
			t.Fatalf("stream %+v: %d events, %d lines, want %d", r, n, len(lines), until-r.after)
		}
		for i, line := range lines {
			e := stored[int(r.after)+i]
			if want := string(updateFrame(nil, e)); line != want {
				t.Fatalf("stream %+v line %d:\n%s\nwant\n%s", r, i, line, want)
			}
			var u wire.SessionUpdate
			if err := json.Unmarshal([]byte(line), &u); err != nil || u.Seq != e.Seq || u.Type != wire.TypeSessionUpdate {
				t.Fatalf("line %d does not decode to seq %d: %v %+v", i, e.Seq, err, u)
			}
		}
	}

	// A log shorter than asked for is an error, not a silent short copy.
	var out bytes.Buffer
	if n, err := cl.StreamEvents(ctx, f.sid, 0, int64(len(in))+5, &out); err == nil || n != int64(len(in)) {
		t.Fatalf("short log: %d events, %v", n, err)
	}
	// Unknown sessions and bad ranges are refused before anything streams.
	var ae *controlclient.APIError
	if _, err := cl.StreamEvents(ctx, "01NOSUCHSESSION", 0, 0, &out); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	resp, err := http.Get(f.httpURL() + "/api/sessions/" + f.sid + "/events/stream?after_seq=-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("negative after_seq: %d", resp.StatusCode)
	}
}

func (f *wsFixture) httpURL() string {
	return "http" + strings.TrimSuffix(strings.TrimPrefix(f.url, "ws"), "/ws")
}

func (f *wsFixture) client() *controlclient.Client {
	return controlclient.New(controlclient.Options{Network: "tcp", Address: strings.TrimPrefix(f.httpURL(), "http://")})
}
