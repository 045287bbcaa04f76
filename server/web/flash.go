package web

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Every form that changes something answers 303 See Other to its page's
// GET address (Post/Redirect/Get), so reloading the page, or going back
// to it, never sends the form again. What the form did, or why it was
// refused, crosses the redirect in a flash: a cookie the next GET of
// that page reads once and clears.
//
// The flash is sealed (AES-GCM) under a key derived from a secret only
// this browser holds, the HttpOnly session token (or, before sign-in,
// the login form's double-submit token), the same way the CSRF token is
// derived: no server state, so every replica can open it, and nobody
// else can write one that opens. A page therefore never shows text an
// attacker chose (as a message in the query string would let them), a
// flash sealed for one sign-in is not shown to another, and the secrets
// it may carry (a new invitation link, a minted pairing code) are not
// readable in the cookie.
const flashCookie = "reeve_flash"

// flashTTL bounds how long a flash waits for its page: the redirect is
// followed at once, so a minute is ample and an old one is never shown.
const flashTTL = time.Minute

// flashRawMax keeps a sealed flash inside a cookie's 4 KiB (browsers
// drop a larger cookie whole, and the outcome with it): base64 adds a
// third, the seal 28 bytes.
const flashRawMax = 2800

// flash is what a form hands to its page across the redirect.
type flash struct {
	// Path is the page it is meant for; another page ignores it.
	Path   string `json:"p"`
	Exp    int64  `json:"x"`
	Notice string `json:"n,omitempty"`
	Error  string `json:"e,omitempty"`
	// InviteLink is a new invitation's single-use accept URL.
	InviteLink string `json:"l,omitempty"`
	// Result is a pairing decision (approved, denied).
	Result string `json:"r,omitempty"`
	// Minted is a pairing code minted from the page.
	Minted *mintedCode `json:"m,omitempty"`
	// Form holds what the person typed into a refused form, to fill it
	// again so they can correct it.
	Form map[string]string `json:"f,omitempty"`
}

type mintedCode struct {
	Code          string    `json:"c"`
	ExpiresAt     time.Time `json:"x"`
	WorkspaceName string    `json:"w"`
}

func flashAEAD(secret string) cipher.AEAD {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("reeve-flash"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return g
}

// clip shortens text to max bytes without splitting a character.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// encode marshals f small enough for its cookie: long texts are clipped,
// and if the refill values still do not fit they are left out (the
// message matters more than the retyping it saves).
func (f flash) encode() ([]byte, error) {
	for _, max := range []int{1000, 300, 100} {
		raw, err := json.Marshal(f.clipped(max, true))
		if err != nil || len(raw) <= flashRawMax {
			return raw, err
		}
	}
	return json.Marshal(f.clipped(100, false))
}

func (f flash) clipped(max int, form bool) flash {
	f.Notice, f.Error = clip(f.Notice, max), clip(f.Error, max)
	refill := f.Form
	f.Form = nil
	if form && len(refill) > 0 {
		f.Form = map[string]string{}
		for k, v := range refill {
			f.Form[clip(k, 40)] = clip(v, max/4)
		}
	}
	return f
}

// redirectWith answers a form with 303 to target (a path on this site,
// optionally with a query), leaving f for that page, sealed under secret.
func (h *Handler) redirectWith(w http.ResponseWriter, r *http.Request, secret, target string, f flash) {
	f.Path, _, _ = strings.Cut(target, "?")
	f.Exp = h.opts.Now().Add(flashTTL).Unix()
	raw, err := f.encode()
	if err == nil && secret != "" {
		g := flashAEAD(secret)
		nonce := make([]byte, g.NonceSize())
		rand.Read(nonce)
		sealed := g.Seal(nonce, nonce, raw, []byte(flashCookie))
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(sealed), Path: "/",
			MaxAge: int(flashTTL / time.Second), HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteLaxMode})
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// takeFlash returns the flash left for this page, if one is there, was
// sealed for this browser's secret and has not expired, and clears it so
// it is shown once. Anything else in the cookie is dropped unseen.
func (h *Handler) takeFlash(w http.ResponseWriter, r *http.Request, secret string) flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return flash{}
	}
	if secret == "" {
		return flash{}
	}
	var (
		f   flash
		raw []byte
	)
	g := flashAEAD(secret)
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err == nil && len(sealed) > g.NonceSize() {
		raw, err = g.Open(nil, sealed[:g.NonceSize()], sealed[g.NonceSize():], []byte(flashCookie))
	} else {
		err = errors.New("malformed")
	}
	if err != nil || json.Unmarshal(raw, &f) != nil || f.Exp < h.opts.Now().Unix() {
		clearCookie(w, r, flashCookie)
		return flash{}
	}
	if f.Path != r.URL.Path {
		// Meant for another page (the person went elsewhere first): leave
		// it for that page; it expires on its own.
		return flash{}
	}
	clearCookie(w, r, flashCookie)
	return f
}

// apply shows a flash's outcome on a page.
func (f flash) apply(p *page) {
	p.Notice, p.Error, p.Form = f.Notice, f.Error, f.Form
}
