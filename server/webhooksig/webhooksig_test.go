package webhooksig

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	secret = []byte("It's a Secret to Everybody")
	body   = []byte(`{"action":"labeled","issue":{"number":7}}`)
	now    = time.Unix(1_800_000_000, 0)
)

// The code host's documented example: this secret and "Hello, World!".
func TestCodeHostPublishedVector(t *testing.T) {
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := SignCodeHost(secret, []byte("Hello, World!")); got != want {
		t.Fatalf("SignCodeHost = %s, want %s", got, want)
	}
	if err := VerifyCodeHost(secret, []byte("Hello, World!"), want); err != nil {
		t.Fatal(err)
	}
}

// Standard Webhooks' published example (from the specification's README).
func TestStandardPublishedVector(t *testing.T) {
	key, err := ParseStandardSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	const id, want = "msg_p5jXN8AQM9LWM0D4loKWxJek", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	at := time.Unix(1614265330, 0)
	ts, sig := SignStandard(id, at, []byte(`{"test": 2432232314}`), key)
	if ts != "1614265330" || sig != want {
		t.Fatalf("SignStandard = %s %s, want %s", ts, sig, want)
	}
	if err := VerifyStandard([][]byte{key}, id, ts, want, []byte(`{"test": 2432232314}`), at.Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
}

func TestCodeHost(t *testing.T) {
	good := SignCodeHost(secret, body)
	cases := []struct {
		name, header string
		body         []byte
		want         error
	}{
		{"good", good, body, nil},
		{"missing", "", body, ErrMissing},
		{"no prefix", strings.TrimPrefix(good, "sha256="), body, ErrMalformed},
		{"sha1 prefix", "sha1=" + strings.TrimPrefix(good, "sha256="), body, ErrMalformed},
		{"other body", good, []byte(`{"action":"opened"}`), ErrMismatch},
		{"other secret", SignCodeHost([]byte("guess"), body), body, ErrMismatch},
		{"truncated", good[:len(good)-2], body, ErrMismatch},
		{"not hex", "sha256=" + strings.Repeat("z", 64), body, ErrMismatch},
		{"upper-case prefix", "SHA256=" + strings.TrimPrefix(good, "sha256="), body, ErrMalformed},
		{"huge", "sha256=" + strings.Repeat("a", 1<<20), body, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := VerifyCodeHost(secret, c.body, c.header); !is(err, c.want) {
				t.Fatalf("VerifyCodeHost = %v, want %v", err, c.want)
			}
		})
	}
}

func TestTracker(t *testing.T) {
	good := SignTracker(secret, body)
	if err := VerifyTracker(secret, body, good); err != nil {
		t.Fatal(err)
	}
	if err := VerifyTracker(secret, body, ""); !is(err, ErrMissing) {
		t.Fatal(err)
	}
	if err := VerifyTracker(secret, append(body, ' '), good); !is(err, ErrMismatch) {
		t.Fatal(err)
	}
	if err := VerifyTracker([]byte("x"), body, good); !is(err, ErrMismatch) {
		t.Fatal(err)
	}
	if err := CheckFresh(now.Add(-6*time.Minute), now, 0); !is(err, ErrStale) {
		t.Fatal(err)
	}
}

func TestChat(t *testing.T) {
	ts, sig := SignChat(secret, now, body)
	cases := []struct {
		name, ts, sig string
		at            time.Time
		want          error
	}{
		{"good", ts, sig, now, nil},
		{"4m59s later", ts, sig, now.Add(4*time.Minute + 59*time.Second), nil},
		{"stale", ts, sig, now.Add(5*time.Minute + time.Second), ErrStale},
		{"future", ts, sig, now.Add(-6 * time.Minute), ErrStale},
		{"missing signature", ts, "", now, ErrMissing},
		{"missing timestamp", "", sig, now, ErrMissing},
		{"other version", ts, "v1=" + strings.TrimPrefix(sig, "v0="), now, ErrMalformed},
		{"no version", ts, strings.TrimPrefix(sig, "v0="), now, ErrMalformed},
		{"timestamp moved", strconv.FormatInt(now.Unix()+1, 10), sig, now, ErrMismatch},
		{"negative timestamp", "-1", sig, now, ErrMalformed},
		{"timestamp with space", " " + ts, sig, now, ErrMalformed},
		{"timestamp overflow", "99999999999999999999", sig, now, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := VerifyChat(secret, body, c.ts, c.sig, c.at, 0); !is(err, c.want) {
				t.Fatalf("VerifyChat = %v, want %v", err, c.want)
			}
		})
	}
	// A stale timestamp re-signed by someone without the secret still fails
	// on the MAC, not the clock.
	ts2, _ := SignChat([]byte("guess"), now, body)
	_, forged := SignChat([]byte("guess"), now, body)
	if err := VerifyChat(secret, body, ts2, forged, now, 0); !is(err, ErrMismatch) {
		t.Fatalf("forged: %v", err)
	}
}

func TestPayments(t *testing.T) {
	old, cur := []byte("whsec_old"), []byte("whsec_current")
	good := SignPayments(now, body, cur)
	rolled := SignPayments(now, body, old, cur)
	cases := []struct {
		name, header string
		at           time.Time
		want         error
	}{
		{"good", good, now, nil},
		{"rolling, second v1 matches", rolled, now, nil},
		{"with v0 noise", good + ",v0=deadbeef", now, nil},
		{"spaces after commas", strings.ReplaceAll(good, ",", ", "), now, nil},
		{"stale", good, now.Add(301 * time.Second), ErrStale},
		{"future", good, now.Add(-301 * time.Second), ErrStale},
		{"missing", "", now, ErrMissing},
		{"no v1", "t=" + strconv.FormatInt(now.Unix(), 10), now, ErrMissing},
		{"no t", strings.SplitN(good, ",", 2)[1], now, ErrMalformed},
		{"two t", good + ",t=1", now, ErrMalformed},
		{"garbage", "hello", now, ErrMalformed},
		{"only old secret", SignPayments(now, body, old), now, ErrMismatch},
		{"t replaced", "t=" + strconv.FormatInt(now.Unix()-1, 10) + "," + strings.SplitN(good, ",", 2)[1], now, ErrMismatch},
		{"too many v1", "t=1" + strings.Repeat(",v1=00", maxSignatures+1), now, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts, err := VerifyPayments(cur, body, c.header, c.at, 0)
			if !is(err, c.want) {
				t.Fatalf("VerifyPayments = %v, want %v", err, c.want)
			}
			if err == nil && !ts.Equal(now) {
				t.Fatalf("timestamp %v, want %v", ts, now)
			}
		})
	}
	if _, err := VerifyPayments(cur, body, good, now.Add(9*time.Minute), 10*time.Minute); err != nil {
		t.Fatalf("custom tolerance: %v", err)
	}
}

func TestStandard(t *testing.T) {
	a, _ := ParseStandardSecret(NewStandardSecret())
	b, _ := ParseStandardSecret(NewStandardSecret())
	const id = "msg_01"
	ts, one := SignStandard(id, now, body, a)
	_, both := SignStandard(id, now, body, a, b)
	_, onlyB := SignStandard(id, now, body, b)
	cases := []struct {
		name       string
		secrets    [][]byte
		id, ts, sg string
		body       []byte
		at         time.Time
		want       error
	}{
		{"good", [][]byte{a}, id, ts, one, body, now, nil},
		{"rotation: header has both", [][]byte{b}, id, ts, both, body, now, nil},
		{"rotation: verifier has both", [][]byte{b, a}, id, ts, one, body, now, nil},
		{"v1a skipped", [][]byte{a}, id, ts, "v1a,AAAA " + one, body, now, nil},
		{"wrong secret", [][]byte{a}, id, ts, onlyB, body, now, ErrMismatch},
		{"other id", [][]byte{a}, "msg_02", ts, one, body, now, ErrMismatch},
		{"other body", [][]byte{a}, id, ts, one, []byte("{}"), now, ErrMismatch},
		{"stale", [][]byte{a}, id, ts, one, body, now.Add(6 * time.Minute), ErrStale},
		{"future", [][]byte{a}, id, ts, one, body, now.Add(-6 * time.Minute), ErrStale},
		{"no id", [][]byte{a}, "", ts, one, body, now, ErrMissing},
		{"no signature", [][]byte{a}, id, ts, "", body, now, ErrMissing},
		{"only v1a", [][]byte{a}, id, ts, "v1a,AAAA", body, now, ErrMissing},
		{"no comma", [][]byte{a}, id, ts, "v1" + strings.TrimPrefix(one, "v1,"), body, now, ErrMalformed},
		{"not base64", [][]byte{a}, id, ts, "v1,%%%", body, now, ErrMalformed},
		{"timestamp in ms", [][]byte{a}, id, ts + "000", one, body, now, ErrMalformed},
		{"too many", [][]byte{a}, id, ts, strings.Repeat(one+" ", maxSignatures+1), body, now, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := VerifyStandard(c.secrets, c.id, c.ts, c.sg, c.body, c.at, 0); !is(err, c.want) {
				t.Fatalf("VerifyStandard = %v, want %v", err, c.want)
			}
		})
	}
}

// A signature header has one valid spelling. Hex decoding alone would also
// take an uppercase rewrite of a true MAC; the fuzzer found that for the
// chat scheme, and every hex scheme must refuse it.
func TestHexSignaturesAreLowercaseOnly(t *testing.T) {
	ts, chat := SignChat(secret, now, body)
	pay := SignPayments(now, body, secret)
	if err := VerifyCodeHost(secret, body, strings.ToUpper(SignCodeHost(secret, body))); err == nil {
		t.Error("code host accepted an uppercase signature")
	}
	if err := VerifyTracker(secret, body, strings.ToUpper(SignTracker(secret, body))); err == nil {
		t.Error("tracker accepted an uppercase signature")
	}
	if err := VerifyChat(secret, body, ts, "v0="+strings.ToUpper(strings.TrimPrefix(chat, "v0=")), now, 0); err == nil {
		t.Error("chat accepted an uppercase signature")
	}
	i := strings.Index(pay, "v1=") + len("v1=")
	if _, err := VerifyPayments(secret, body, pay[:i]+strings.ToUpper(pay[i:]), now, 0); err == nil {
		t.Error("payments accepted an uppercase signature")
	}
}

func TestStandardSecret(t *testing.T) {
	s := NewStandardSecret()
	if !strings.HasPrefix(s, "whsec_") {
		t.Fatal(s)
	}
	k, err := ParseStandardSecret(s)
	if err != nil || len(k) != 32 {
		t.Fatalf("%v %d", err, len(k))
	}
	if k2, err := ParseStandardSecret(strings.TrimPrefix(s, "whsec_")); err != nil || string(k2) != string(k) {
		t.Fatal("prefix must be optional")
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!!", "whsec_" + base64.StdEncoding.EncodeToString(nil)} {
		if _, err := ParseStandardSecret(bad); err == nil {
			t.Fatalf("ParseStandardSecret(%q) accepted", bad)
		}
	}
	if NewStandardSecret() == s {
		t.Fatal("secrets repeat")
	}
}

// A verifier must never panic or accept on hostile input: whatever the
// headers, only the true signature passes.
func FuzzVerify(f *testing.F) {
	ts, sig := SignChat(secret, now, body)
	f.Add(SignCodeHost(secret, body), ts, sig, SignPayments(now, body, secret), body)
	f.Add("sha256=", "", "v0=", "t=,v1=", []byte{})
	f.Add("", "1", "v1,AAAA v1a,B", "t=1,v1=zz,v1", []byte("x"))
	key := []byte("0123456789abcdef")
	f.Fuzz(func(t *testing.T, h1, ts, h2, h3 string, b []byte) {
		if VerifyCodeHost(secret, b, h1) == nil && h1 != SignCodeHost(secret, b) {
			t.Fatalf("code host accepted %q", h1)
		}
		if VerifyTracker(secret, b, h1) == nil && strings.TrimSpace(h1) != SignTracker(secret, b) {
			t.Fatalf("tracker accepted %q", h1)
		}
		if VerifyChat(secret, b, ts, h2, now, 0) == nil {
			if want := chatVersion + "=" + hex.EncodeToString(chatMAC(secret, ts, b)); h2 != want {
				t.Fatalf("chat accepted %q", h2)
			}
		}
		if _, err := VerifyPayments(secret, b, h3, now, 0); err == nil {
			var tsText string
			for _, part := range strings.Split(h3, ",") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
					tsText = v
				}
			}
			if !strings.Contains(h3, "v1="+hex.EncodeToString(paymentsMAC(secret, tsText, b))) {
				t.Fatalf("payments accepted %q", h3)
			}
		}
		if VerifyStandard([][]byte{key}, "msg", ts, h2, b, now, 0) == nil {
			_, want := SignStandard("msg", mustUnix(t, ts), b, key)
			if !strings.Contains(h2, want) {
				t.Fatalf("standard accepted %q", h2)
			}
		}
	})
}

func mustUnix(t *testing.T, s string) time.Time {
	ts, err := parseUnix(s)
	if err != nil {
		t.Fatalf("accepted a timestamp that does not parse: %q", s)
	}
	return ts
}

func is(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}
