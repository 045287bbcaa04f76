package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

// A session's launch and policy events read as one line each.
func TestRenderLaunchAndPolicy(t *testing.T) {
	var buf bytes.Buffer
	r := &renderer{w: &buf}
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	r.render(wire.SessionUpdate{Kind: wire.KindPolicy, Data: raw(wire.PolicyInForce{Change: wire.PolicyStart, Hash: "sha256:ab"})})
	r.render(wire.SessionUpdate{Kind: wire.KindLaunch, Data: raw(wire.Launch{Turn: 2, Argv: []string{"/bin/claude", "-p", "--resume", "s1"}})})
	r.render(wire.SessionUpdate{Kind: wire.KindPolicy, Data: raw(wire.PolicyInForce{Change: wire.PolicyChanged, Hash: "none", Previous: "sha256:ab"})})
	want := "[policy] start: sha256:ab\n[launch] turn 2: /bin/claude -p --resume s1\n[policy] changed: none (was sha256:ab)\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
