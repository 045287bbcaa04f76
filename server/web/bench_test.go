package web_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/sdk/remote"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web/webtest"
)

// peer is a paired daemon written with server/sdk/e2e, standing in for a
// real one where the test needs to control the events' pace: it answers
// the browser's handshake, its hello and its requests, and sends the
// events it is told to on each subscribed channel.
type peer struct {
	t         testing.TB
	ws        *websocket.Conn
	static    *ecdh.PrivateKey
	workspace string
	install   string

	mu    sync.Mutex
	chans map[string]*e2e.Session
	subs  map[string]bool
	wmu   sync.Mutex
	// log is every event sent, so a page that reconnects resumes from
	// its after_seq as from a real daemon. emitMu orders replay and
	// live sending.
	emitMu sync.Mutex
	log    []map[string]any
}

// pairPeer pairs a new machine to the user's workspace and connects it to
// the server's relay.
func pairPeer(t testing.TB, s *servertest.Server, u servertest.User) *peer {
	t.Helper()
	ctx := context.Background()
	static, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	daemon := s.Client("")
	pc, err := daemon.MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "bench-box", AnchorPublicKey: base64.StdEncoding.EncodeToString(static.PublicKey().Bytes())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Client.ApprovePairingCode(ctx, pc.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
		t.Fatal(err)
	}
	st, err := daemon.PairingStatus(ctx, pc.Code, pc.StatusToken)
	if err != nil || st.RelayCredentials == nil {
		t.Fatalf("collect the credential: %+v %v", st, err)
	}
	rc := st.RelayCredentials
	tok, err := s.Client(rc.IssueToken).RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := remote.WSURL(s.URL, relaywire.RoleDaemon, rc.WorkspaceID, rc.InstallID)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := remote.DialRelay(ctx, http.DefaultClient, u2, tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(relaywire.MaxEnvelope)
	p := &peer{t: t, ws: ws, static: static, workspace: rc.WorkspaceID, install: rc.InstallID, chans: map[string]*e2e.Session{}, subs: map[string]bool{}}
	t.Cleanup(func() { ws.CloseNow() })
	go p.serve()
	return p
}

func (p *peer) write(ch string, payload []byte) error {
	b, _ := json.Marshal(relaywire.Envelope{Type: relaywire.TypeData, Channel: ch, Payload: base64.StdEncoding.EncodeToString(payload)})
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.ws.Write(context.Background(), websocket.MessageText, b)
}

func (p *peer) send(ch string, frame any) error {
	p.mu.Lock()
	sess := p.chans[ch]
	p.mu.Unlock()
	if sess == nil {
		return errors.New("the channel is closed")
	}
	b, _ := json.Marshal(frame)
	return sess.Seal(b, func(f []byte) error { return p.write(ch, f) })
}

func (p *peer) serve() {
	for {
		_, b, err := p.ws.Read(context.Background())
		if err != nil {
			return
		}
		var env relaywire.Envelope
		if json.Unmarshal(b, &env) != nil || env.Type != relaywire.TypeData {
			if env.Type == relaywire.TypeClose {
				p.mu.Lock()
				delete(p.chans, env.Channel)
				delete(p.subs, env.Channel)
				p.mu.Unlock()
			}
			continue
		}
		msg, _ := base64.StdEncoding.DecodeString(env.Payload)
		p.mu.Lock()
		sess := p.chans[env.Channel]
		p.mu.Unlock()
		switch {
		case sess == nil && len(msg) == 1 && msg[0] == e2e.KindAnchorRequest:
			p.write(env.Channel, e2e.AnchorAnswer(p.static.PublicKey().Bytes()))
		case sess == nil:
			hs, _, err := e2e.Accept(p.static, e2e.Prologue(p.workspace, p.install), msg)
			if err != nil {
				p.t.Logf("peer: handshake: %v", err)
				continue
			}
			m2, s, err := hs.Reply(e2e.Admission{Admitted: true, DaemonID: "bench"}.Encode())
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.chans[env.Channel] = s
			p.mu.Unlock()
			p.write(env.Channel, m2)
			p.send(env.Channel, map[string]any{"type": "hello", "protocol_version": 1, "version": "bench-peer", "daemon_id": "bench"})
		default:
			frame, done, err := sess.Open(msg)
			if err != nil || !done {
				continue
			}
			var req struct {
				Type     string `json:"type"`
				ID       string `json:"id"`
				AfterSeq int    `json:"after_seq"`
			}
			json.Unmarshal(frame, &req)
			switch req.Type {
			case "hello", "":
			case "subscribe":
				p.send(env.Channel, map[string]any{"type": "ack", "id": req.ID, "ok": true})
				ch := env.Channel
				go func() {
					p.emitMu.Lock()
					defer p.emitMu.Unlock()
					for i := req.AfterSeq; i < len(p.log); i++ {
						if p.send(ch, p.log[i]) != nil {
							return
						}
					}
					p.mu.Lock()
					p.subs[ch] = true
					p.mu.Unlock()
				}()
			case "list":
				p.send(env.Channel, map[string]any{"type": "ack", "id": req.ID, "ok": true, "result": map[string]any{"sessions": []any{}}})
			default:
				p.send(env.Channel, map[string]any{"type": "ack", "id": req.ID, "ok": true})
			}
		}
	}
}

func (p *peer) subscribed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for ch := range p.subs {
		out = append(out, ch)
	}
	return out
}

// emit sends events seq from..to of a session to every subscriber, at
// rate events per second, each stamped with the time it leaves. Seqs
// must follow those already sent.
func (p *peer) emit(sid string, from, to int, rate int) {
	start := time.Now()
	for seq := from; seq <= to; seq++ {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(seq-from) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		u := map[string]any{"type": "session-update", "session_id": sid, "seq": seq, "ts": time.Now().UTC().Format(time.RFC3339Nano),
			"kind": "agent-message", "data": map[string]any{"text": fmt.Sprintf("event %d: the agent reports some progress on the task", seq)}}
		p.emitMu.Lock()
		p.log = append(p.log, u)
		for _, ch := range p.subscribed() {
			p.send(ch, u)
		}
		p.emitMu.Unlock()
	}
}

func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// openSessionPage signs a browser in and opens a session page on the
// peer's machine, connected.
func openSessionPage(b testing.TB, s *servertest.Server, u servertest.User, p *peer, sid string) context.Context {
	b.Helper()
	ctx := webtest.Browser(b)
	link, err := s.Host.IssueLoginLink(context.Background(), u.Email)
	if err != nil {
		b.Fatal(err)
	}
	page := "/w/" + u.Workspace + "/m/" + p.install + "/s/" + sid
	webtest.Steps(b, ctx, "open the session page",
		chromedp.Navigate(link+"&next="+strings.ReplaceAll(page, "/", "%2F")),
		chromedp.Click(webtest.CSS("#signin")),
		chromedp.WaitVisible(webtest.CSS("#log")),
	)
	webtest.Read(b, ctx, chromedp.Poll[bool](`document.querySelector("#conn").dataset.state === "connected"`, chromedp.WithPollingTimeout(60*time.Second)))
	for deadline := time.Now().Add(30 * time.Second); len(p.subscribed()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the page did not subscribe")
		}
	}
	return ctx
}

// BenchmarkEventToRender measures the time from a daemon's event (its
// timestamp as it leaves the daemon) to its row in the page, through the
// relay and the browser's decryption, at 10 (the baseline) and 1,000
// events per second; and the page's JavaScript heap and DOM size after
// 100k events, against the page before any event (the baseline).
func BenchmarkEventToRender(b *testing.B) {
	s := servertest.Start(b, servertest.Options{})
	u := s.NewUser("owner@example.com")
	p := pairPeer(b, s, u)
	for range b.N {
		ctx := openSessionPage(b, s, u, p, "01BENCHSESSION")
		seq := 1
		for _, rate := range []int{10, 1000} {
			n := rate * 3
			evalJS := func(expr string) []float64 { return webtest.Read(b, ctx, chromedp.Evaluate[[]float64](expr)) }
			evalJS(`window.reeve.log.lat.splice(0), []`)
			p.emit("01BENCHSESSION", seq, seq+n-1, rate)
			seq += n
			webtest.Read(b, ctx, chromedp.Poll[bool](fmt.Sprintf(`window.reeve.log.events.length >= %d`, seq-1), chromedp.WithPollingTimeout(60*time.Second)))
			lat := evalJS(`window.reeve.log.lat.slice()`)
			b.ReportMetric(percentile(lat, 0.5), fmt.Sprintf("p50-ms@%d/s", rate))
			b.ReportMetric(percentile(lat, 0.99), fmt.Sprintf("p99-ms@%d/s", rate))
		}
		before := heapMB(b, ctx)
		p.emit("01BENCHSESSION", seq, seq+100000-1, 2000)
		seq += 100000
		start := time.Now()
		for n := 0.0; n < float64(seq-1); time.Sleep(500 * time.Millisecond) {
			n = webtest.Read(b, ctx, chromedp.Evaluate[float64](`window.reeve.log.events.length`))
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("the page rendered %v of %d events in 10 minutes", n, seq-1)
			}
		}
		after := heapMB(b, ctx)
		nodes := webtest.Read(b, ctx, chromedp.Evaluate[float64](`document.getElementsByTagName("*").length`))
		b.ReportMetric(before, "heap-MB-before")
		b.ReportMetric(after, "heap-MB-after-100k")
		b.ReportMetric(nodes, "dom-nodes-after-100k")
	}
}

func heapMB(b testing.TB, ctx context.Context) float64 {
	b.Helper()
	sctx, cancel := context.WithTimeout(ctx, webtest.StepTimeout)
	defer cancel()
	if _, err := chromedp.Call(sctx, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
		b.Fatal(err)
	}
	u, err := chromedp.Call(sctx, runtime.GetHeapUsage, cdp.Empty{})
	if err != nil {
		b.Fatal(err)
	}
	return u.UsedSize / (1 << 20)
}
