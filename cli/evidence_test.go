package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

func TestEvidenceVerifyCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env, out, _ := testEnv()
	if code := Execute(context.Background(), env, []string{"server", "token", "create", "--data-dir", dir, "--user", "ev@example.com"}); code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	tok := strings.TrimSpace(out.String())
	senv, _, _ := testEnv()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, &serverOptions{env: senv, listen: "127.0.0.1:0", dataDir: dir, ready: func(u string) { ready <- u }})
	}()
	url := <-ready
	defer func() {
		cancel()
		<-done
	}()
	c := &sdk.Client{BaseURL: url, Token: tok}
	ws, err := c.ListWorkspaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	base := "/api/resources/" + ws[0].ID + "/sessions"
	sess, err := c.CreateRecord(context.Background(), base, map[string]any{"title": "t", "source_kind": "cli"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateRecord(context.Background(), base+"/"+sess.ID+"/collaboration-events", map[string]any{"event_kind": "comment_created", "body_plaintext": "hello"}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", url+base+"/"+sess.ID+"/trace-export", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tmp := t.TempDir()
	file := filepath.Join(tmp, "trace.json")
	os.WriteFile(file, bundle, 0o600)

	run := func(args ...string) (int, string) {
		env, out, errb := testEnv()
		code := Execute(context.Background(), env, args)
		return code, out.String() + errb.String()
	}
	if code, o := run("evidence", "verify", file, "--server", url); code != ExitOK || !strings.Contains(o, "verified trace of session "+sess.ID) {
		t.Fatalf("verify --server: %d %s", code, o)
	}
	// A review packet's export verifies the same way.
	var packet sdk.ReviewPacketResponse
	if _, err := c.Do(context.Background(), "POST", "/api/resources/"+ws[0].ID+"/review-packets",
		sdk.ReviewPacketCreateRequest{Title: "t", Evidence: []sdk.EvidenceLink{{Kind: "session", ID: sess.ID}}}, &packet); err != nil {
		t.Fatal(err)
	}
	preq, _ := http.NewRequest("GET", url+"/api/resources/"+ws[0].ID+"/review-packets/"+packet.Data.ID+"/export", nil)
	preq.Header.Set("Authorization", "Bearer "+tok)
	presp, err := http.DefaultClient.Do(preq)
	if err != nil {
		t.Fatal(err)
	}
	pbundle, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	pfile := filepath.Join(t.TempDir(), "packet.json")
	os.WriteFile(pfile, pbundle, 0o600)
	if code, o := run("evidence", "verify", pfile, "--server", url); code != ExitOK || !strings.Contains(o, "verified review packet "+packet.Data.ID) || !strings.Contains(o, "1 evidence links") {
		t.Fatalf("verify a review packet: %d %s", code, o)
	}
	os.WriteFile(pfile, []byte(strings.Replace(string(pbundle), `"payload":"`, `"payload":"e`, 1)), 0o600)
	if code, o := run("evidence", "verify", pfile, "--server", url); code != ExitInvalid {
		t.Fatalf("a tampered review packet: %d %s", code, o)
	}
	// --key with the JWKS, with one JWK, and with the bare key.
	var keys sdk.JWKS
	kr, _ := http.Get(url + "/api/.well-known/jwks.json")
	json.NewDecoder(kr.Body).Decode(&keys)
	kr.Body.Close()
	set, _ := json.Marshal(keys)
	one, _ := json.Marshal(keys.Keys[0])
	pub, _ := keys.Keys[0].PublicKey()
	for name, content := range map[string][]byte{"jwks.json": set, "jwk.json": one, "key.b64": []byte(base64.StdEncoding.EncodeToString(pub) + "\n")} {
		p := filepath.Join(tmp, name)
		os.WriteFile(p, content, 0o600)
		if code, o := run("evidence", "verify", file, "--key", p, "--json"); code != ExitOK || !strings.Contains(o, `"verified": true`) {
			t.Fatalf("verify --key %s: %d %s", name, code, o)
		}
	}
	// A changed byte: exit 8.
	bad := []byte(string(bundle))
	i := strings.Index(string(bad), `"payload":"`) + 20
	bad[i] ^= 0x02
	badFile := filepath.Join(tmp, "bad.json")
	os.WriteFile(badFile, bad, 0o600)
	if code, o := run("evidence", "verify", badFile, "--server", url); code != ExitInvalid || !strings.Contains(o, "does not verify") {
		t.Fatalf("tampered: %d %s", code, o)
	}
	// A wrong key: exit 8. Bad usage: exit 2.
	wrong := filepath.Join(tmp, "wrong.b64")
	os.WriteFile(wrong, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600)
	if code, _ := run("evidence", "verify", file, "--key", wrong); code != ExitInvalid {
		t.Fatalf("wrong key: exit %d", code)
	}
	if code, _ := run("evidence", "verify", file); code != ExitUsage {
		t.Fatalf("no key source: exit %d", code)
	}
	if code, _ := run("evidence", "verify", filepath.Join(tmp, "missing.json"), "--server", url); code != ExitNotFound {
		t.Fatalf("missing file: exit %d", code)
	}
}
