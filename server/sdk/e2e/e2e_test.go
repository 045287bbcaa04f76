package e2e

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
)

func anchorKey(t testing.TB) *ecdh.PrivateKey {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pair runs a whole handshake and returns the client's and the daemon's
// sessions.
func pair(t testing.TB, static *ecdh.PrivateKey) (client, daemon *Session) {
	t.Helper()
	pro := Prologue("W1", "T1")
	hs, err := NewClient(static.PublicKey().Bytes(), pro)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := hs.Hello([]byte("client hello"))
	if err != nil {
		t.Fatal(err)
	}
	dh, p1, err := Accept(static, pro, m1)
	if err != nil {
		t.Fatal(err)
	}
	if string(p1) != "client hello" {
		t.Fatalf("daemon read payload %q", p1)
	}
	m2, daemon, err := dh.Reply(Admission{Admitted: true, DaemonID: "D"}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	client, p2, err := hs.Finish(m2)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := DecodeAdmission(p2); err != nil || a.DaemonID != "D" {
		t.Fatalf("admission %+v %v", a, err)
	}
	if !bytes.Equal(client.Binding(), daemon.Binding()) {
		t.Fatal("the two ends disagree on the handshake hash")
	}
	return client, daemon
}

// frames seals msg and returns its frames.
func frames(t testing.TB, s *Session, msg []byte) [][]byte {
	t.Helper()
	var out [][]byte
	if err := s.Seal(msg, func(f []byte) error { out = append(out, f); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// deliver opens each frame and returns the one message they make.
func deliver(t testing.TB, s *Session, fs [][]byte) []byte {
	t.Helper()
	for i, f := range fs {
		msg, done, err := s.Open(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if done != (i == len(fs)-1) {
			t.Fatalf("frame %d of %d: done=%v", i, len(fs), done)
		}
		if done {
			return msg
		}
	}
	t.Fatal("no frames")
	return nil
}

func TestRoundTripBothDirections(t *testing.T) {
	c, d := pair(t, anchorKey(t))
	for _, msg := range []string{`{"type":"hello"}`, "", strings.Repeat("x", MaxChunk), strings.Repeat("yz", MaxChunk+7)} {
		fs := frames(t, c, []byte(msg))
		if want := max(1, (len(msg)+MaxChunk-1)/MaxChunk); len(fs) != want {
			t.Fatalf("%d bytes gave %d frames, want %d", len(msg), len(fs), want)
		}
		for _, f := range fs {
			if len(f) > MaxFrame {
				t.Fatalf("frame of %d bytes is over MaxFrame", len(f))
			}
		}
		if got := deliver(t, d, fs); string(got) != msg {
			t.Fatalf("daemon got %d bytes, want %d", len(got), len(msg))
		}
		if got := deliver(t, c, frames(t, d, []byte(msg))); string(got) != msg {
			t.Fatalf("client got %d bytes, want %d", len(got), len(msg))
		}
	}
}

func TestCiphertextHidesPlaintext(t *testing.T) {
	c, _ := pair(t, anchorKey(t))
	marker := []byte("PLAINTEXT-MARKER-42")
	for _, f := range frames(t, c, bytes.Repeat(marker, 100)) {
		if bytes.Contains(f, marker) {
			t.Fatal("a sealed frame contains the plaintext")
		}
	}
	// The same message twice seals differently (the counter is the nonce).
	a, b := frames(t, c, marker), frames(t, c, marker)
	if bytes.Equal(a[0][headerLen:], b[0][headerLen:]) {
		t.Fatal("two seals of one message are identical")
	}
}

func TestWrongAnchorFails(t *testing.T) {
	real, other := anchorKey(t), anchorKey(t)
	pro := Prologue("W", "T")

	// The client trusts other's key; the daemon holding real cannot read
	// message 1.
	hs, _ := NewClient(other.PublicKey().Bytes(), pro)
	m1, _ := hs.Hello(nil)
	if _, _, err := Accept(real, pro, m1); !errors.Is(err, ErrAnchor) {
		t.Fatalf("accept with the wrong anchor: %v", err)
	}

	// An impostor that does not hold the anchor answers with a message 2
	// of its own making: the client refuses it.
	hs, _ = NewClient(real.PublicKey().Bytes(), pro)
	m1, _ = hs.Hello(nil)
	impostor := anchorKey(t)
	fake, _, err := Accept(impostor, pro, m1)
	if err == nil {
		t.Fatal("an impostor opened a message sealed for another anchor")
	}
	// Forge a message 2 anyway, as a relay in the middle would.
	eph := anchorKey(t)
	forged := append([]byte{KindHello2}, eph.PublicKey().Bytes()...)
	forged = append(forged, make([]byte, 40)...)
	if _, _, err := hs.Finish(forged); !errors.Is(err, ErrAnchor) {
		t.Fatalf("finish with a forged reply: %v (fake=%v)", err, fake)
	}
}

func TestPrologueMismatchFails(t *testing.T) {
	k := anchorKey(t)
	hs, _ := NewClient(k.PublicKey().Bytes(), Prologue("W", "T1"))
	m1, _ := hs.Hello(nil)
	if _, _, err := Accept(k, Prologue("W", "T2"), m1); !errors.Is(err, ErrAnchor) {
		t.Fatalf("accept for another runtime target: %v", err)
	}
}

func TestTamperedHandshakeFails(t *testing.T) {
	k := anchorKey(t)
	pro := Prologue("W", "T")
	hs, _ := NewClient(k.PublicKey().Bytes(), pro)
	m1, _ := hs.Hello([]byte("p"))
	for i := 1; i < len(m1); i++ {
		bad := bytes.Clone(m1)
		bad[i] ^= 0x20
		if _, _, err := Accept(k, pro, bad); err == nil {
			t.Fatalf("message 1 with byte %d flipped was accepted", i)
		}
	}
	dh, _, err := Accept(k, pro, m1)
	if err != nil {
		t.Fatal(err)
	}
	m2, _, _ := dh.Reply([]byte("q"))
	for _, i := range []int{5, len(m2) - 1} {
		hs2 := *hs
		sym := *hs.sym
		hs2.sym = &sym
		bad := bytes.Clone(m2)
		bad[i] ^= 1
		if _, _, err := hs2.Finish(bad); err == nil {
			t.Fatalf("message 2 with byte %d flipped was accepted", i)
		}
	}
}

func TestTamperedFrameKillsSession(t *testing.T) {
	c, d := pair(t, anchorKey(t))
	f := frames(t, c, []byte("launch"))[0]
	bad := bytes.Clone(f)
	bad[len(bad)-1] ^= 1
	if _, _, err := d.Open(bad); !errors.Is(err, ErrTampered) || !errors.Is(err, ErrFrame) {
		t.Fatalf("tampered frame: %v", err)
	}
	// The genuine frame no longer helps: the session is dead.
	if _, _, err := d.Open(f); !errors.Is(err, ErrTampered) {
		t.Fatalf("after tampering the session still opens frames: %v", err)
	}
}

func TestTamperedHeaderFails(t *testing.T) {
	for name, mutate := range map[string]func([]byte){
		"final flag cleared": func(f []byte) { f[1] = 0 },
		"counter changed":    func(f []byte) { f[9] = 1 },
		"kind changed":       func(f []byte) { f[0] = KindHello1 },
		"body flipped":       func(f []byte) { f[headerLen] ^= 0x80 },
	} {
		c, d := pair(t, anchorKey(t))
		f := frames(t, c, []byte("prompt"))[0]
		mutate(f)
		if _, done, err := d.Open(f); err == nil {
			t.Fatalf("%s: accepted (done=%v)", name, done)
		}
	}
}

func TestReplayAndReorderRefused(t *testing.T) {
	c, d := pair(t, anchorKey(t))
	f0 := frames(t, c, []byte("one"))[0]
	if m := deliver(t, d, [][]byte{f0}); string(m) != "one" {
		t.Fatal(string(m))
	}
	if _, _, err := d.Open(f0); !errors.Is(err, ErrReplay) {
		t.Fatalf("replayed frame: %v", err)
	}

	c, d = pair(t, anchorKey(t))
	f0 = frames(t, c, []byte("one"))[0]
	f1 := frames(t, c, []byte("two"))[0]
	f2 := frames(t, c, []byte("three"))[0]
	deliver(t, d, [][]byte{f0})
	if _, _, err := d.Open(f2); !errors.Is(err, ErrReplay) {
		t.Fatalf("skipped frame: %v", err)
	}
	if _, _, err := d.Open(f1); err == nil {
		t.Fatal("the session recovered after a refused frame")
	}
}

func TestFrameFromAnotherChannelRefused(t *testing.T) {
	k := anchorKey(t)
	c1, _ := pair(t, k)
	_, d2 := pair(t, k)
	// Same anchor, same counter, other channel: other keys.
	if _, _, err := d2.Open(frames(t, c1, []byte("x"))[0]); !errors.Is(err, ErrTampered) {
		t.Fatalf("frame of another channel: %v", err)
	}
	// A client cannot feed the daemon its own direction's frames back.
	c, d := pair(t, k)
	f := frames(t, d, []byte("echo"))[0]
	if _, _, err := d.Open(f); !errors.Is(err, ErrTampered) {
		t.Fatalf("reflected frame: %v", err)
	}
	_ = c
}

func TestSizeBounds(t *testing.T) {
	c, d := pair(t, anchorKey(t))
	d.SetMaxMessage(MaxChunk * 2)
	fs := frames(t, c, make([]byte, MaxChunk*3))
	var err error
	for _, f := range fs {
		if _, _, err = d.Open(f); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("message over the bound: %v", err)
	}
	if _, err := ParseFrame(make([]byte, MaxFrame+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	hs, _ := NewClient(anchorKey(t).PublicKey().Bytes(), nil)
	if _, err := hs.Hello(make([]byte, MaxHandshakePayload+1)); !errors.Is(err, ErrHandshake) {
		t.Fatalf("oversized hello payload: %v", err)
	}
	if _, _, err := Accept(anchorKey(t), nil, make([]byte, MaxHandshakeMessage+1)); !errors.Is(err, ErrHandshake) {
		t.Fatalf("oversized hello: %v", err)
	}
}

func TestConcurrentSealKeepsOrder(t *testing.T) {
	c, d := pair(t, anchorKey(t))
	var mu sync.Mutex
	var wire [][]byte
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := bytes.Repeat([]byte{byte('a' + i)}, MaxChunk+100)
			c.Seal(msg, func(f []byte) error {
				mu.Lock()
				wire = append(wire, f)
				mu.Unlock()
				return nil
			})
		}()
	}
	wg.Wait()
	n := 0
	for _, f := range wire {
		msg, done, err := d.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			n++
			for _, b := range msg {
				if b != msg[0] {
					t.Fatal("frames of two messages interleaved")
				}
			}
		}
	}
	if n != 16 {
		t.Fatalf("%d messages, want 16", n)
	}
}

func TestAnchorQuery(t *testing.T) {
	k := anchorKey(t)
	pub := k.PublicKey().Bytes()
	fp := Fingerprint(pub)
	got, err := VerifyAnchorAnswer(AnchorAnswer(pub), strings.ToLower(strings.ReplaceAll(fp, "-", " ")))
	if err != nil || !bytes.Equal(got, pub) {
		t.Fatalf("verify: %v", err)
	}
	other := anchorKey(t).PublicKey().Bytes()
	if _, err := VerifyAnchorAnswer(AnchorAnswer(other), fp); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("another key passed for the fingerprint: %v", err)
	}
	if _, err := VerifyAnchorAnswer(AnchorAnswer(pub), fp[:10]); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("a truncated fingerprint matched: %v", err)
	}
}

func TestAdmissionRefusal(t *testing.T) {
	_, err := DecodeAdmission(Admission{Reason: "remote control is locked"}.Encode())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("refusal: %v", err)
	}
}

// FuzzOpen feeds arbitrary bytes to the decoders: they never panic, never
// accept what was not sealed by the peer, and ParseFrame's bounds hold.
func FuzzOpen(f *testing.F) {
	k, _ := ecdh.X25519().GenerateKey(rand.Reader)
	c, _ := pair(f, k)
	for _, seed := range frames(f, c, []byte(`{"type":"hello","protocol_version":1}`)) {
		f.Add(seed)
	}
	f.Add([]byte{KindData, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{KindHello1})
	f.Add(AnchorAnswer(make([]byte, 32)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, d := pair(t, k)
		if h, err := ParseFrame(data); err == nil {
			if len(data) > MaxFrame || len(data) < headerLen+tagLen || data[0] != KindData {
				t.Fatalf("ParseFrame accepted %d bytes of kind %d", len(data), data[0])
			}
			_ = h
		}
		if _, _, err := d.Open(data); err == nil {
			t.Fatal("opened a frame nobody sealed")
		}
		if _, _, err := Accept(k, nil, data); err == nil {
			t.Fatal("accepted a hello nobody sealed")
		}
		VerifyAnchorAnswer(data, Fingerprint(k.PublicKey().Bytes()))
		Kind(data)
	})
}
