package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"unicode/utf8"
)

// inEnvelope is a received envelope with its payload kept as the raw JSON
// string it arrived as (quotes included), so that the relay forwards the
// very bytes it got and never decodes what is inside.
type inEnvelope struct {
	Type    string
	Channel string
	Reason  string
	Payload []byte // raw JSON string, or nil
}

var errNotEnvelope = errors.New("not a relay envelope")

// decodeEnvelope reads the flat object {"t","ch","p","reason"}. A scanner
// handles the usual shape without reflection; anything it does not expect
// (escapes in the short fields, other value types) goes through
// encoding/json, which then decides.
func decodeEnvelope(b []byte) (inEnvelope, error) {
	if e, ok := scanEnvelope(b); ok {
		return e, nil
	}
	var raw struct {
		Type    string          `json:"t"`
		Channel string          `json:"ch"`
		Reason  string          `json:"reason"`
		Payload json.RawMessage `json:"p"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return inEnvelope{}, errNotEnvelope
	}
	e := inEnvelope{Type: raw.Type, Channel: raw.Channel, Reason: raw.Reason}
	if p := bytes.TrimSpace(raw.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '"' {
			return inEnvelope{}, errors.New("the payload p must be a string")
		}
		e.Payload = p
	}
	return e, nil
}

// scanEnvelope is the fast path; ok=false means "let encoding/json look".
func scanEnvelope(b []byte) (e inEnvelope, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return e, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return e, skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return e, false
		}
		kEnd, kEsc := scanString(b, i)
		if kEnd < 0 || kEsc {
			return e, false
		}
		key := b[i+1 : kEnd]
		i = skipWS(b, kEnd+1)
		if i >= len(b) || b[i] != ':' {
			return e, false
		}
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return e, false // null, numbers, objects: the slow path decides
		}
		if string(key) == "p" {
			end := payloadEnd(b, i)
			if end < 0 {
				return e, false
			}
			e.Payload = b[i : end+1]
			i = skipWS(b, end+1)
			if i >= len(b) {
				return e, false
			}
			if b[i] == '}' {
				return e, skipWS(b, i+1) == len(b)
			}
			if b[i] != ',' {
				return e, false
			}
			i = skipWS(b, i+1)
			continue
		}
		vEnd, vEsc := scanString(b, i)
		if vEnd < 0 {
			return e, false
		}
		switch string(key) {
		case "t", "ch", "reason":
			// Escapes and invalid UTF-8 (which encoding/json replaces)
			// are the slow path's.
			if vEsc || !utf8.Valid(b[i+1:vEnd]) {
				return e, false
			}
			v := string(b[i+1 : vEnd])
			switch string(key) {
			case "t":
				e.Type = v
			case "ch":
				e.Channel = v
			default:
				e.Reason = v
			}
		default:
			// encoding/json matches keys without regard to case ("T" is
			// t): any other key is for it to read.
			return e, false
		}
		i = skipWS(b, vEnd+1)
		if i >= len(b) {
			return e, false
		}
		if b[i] == '}' {
			return e, skipWS(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return e, false
		}
		i = skipWS(b, i+1)
	}
}

// payloadEnd finds the closing quote of the payload string starting at
// b[i]: the first quote not escaped by an odd run of backslashes. What is
// inside is the ends' business; the relay only needs the boundary, and
// finds it with the runtime's vectorised byte search.
func payloadEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for q-1-n > i && b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q
		}
		j = q + 1
	}
}

// scanString returns the index of the closing quote of the JSON string
// starting at b[i], and whether it contains escapes; -1 when it is not a
// valid JSON string (control characters, bad escapes, unterminated).
func scanString(b []byte, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j, esc
		case c == '\\':
			esc = true
			if j+1 >= len(b) {
				return -1, esc
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+5 >= len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return -1, esc
				}
				j += 5
			default:
				return -1, esc
			}
		case c < 0x20:
			return -1, esc
		}
	}
	return -1, esc
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Outgoing envelopes are assembled from parts; channel ids are the relay's
// own ([0-9a-z.]) and need no escaping.

func frameOpen(ch string) []byte {
	return append(append([]byte(`{"t":"open","ch":"`), ch...), `"}`...)
}

func frameDaemonData(ch string, p []byte) []byte {
	b := getFrame(24 + len(ch) + len(p))
	b = append(b, `{"t":"data","ch":"`...)
	b = append(b, ch...)
	b = append(b, `","p":`...)
	b = append(b, p...)
	return append(b, '}')
}

func frameClientData(p []byte) []byte {
	b := getFrame(16 + len(p))
	b = append(b, `{"t":"data","p":`...)
	b = append(b, p...)
	return append(b, '}')
}

// frameEnd is a close or error envelope, with the channel on a daemon's
// connection and without it on a client's.
func frameEnd(typ, ch, reason string) []byte {
	b := append([]byte(`{"t":"`), typ...)
	b = append(b, '"')
	if ch != "" {
		b = append(b, `,"ch":"`...)
		b = append(b, ch...)
		b = append(b, '"')
	}
	if reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, reason)
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...)
}

// payloadString turns a raw JSON string into its value for the bus, which
// carries it as a JSON string again; without escapes it is a plain slice.
func payloadString(raw []byte) string {
	if len(raw) < 2 {
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "" // scanned as valid before; cannot happen
	}
	return s
}

// rawPayload is the inverse of payloadString.
func rawPayload(s string) []byte {
	if s == "" {
		return nil
	}
	return appendJSONString(nil, s)
}

// Buffers are pooled: every forwarded frame is read into one and written
// from another, and at tens of thousands of frames a second the garbage
// would otherwise cost more than the routing. Large ones are not kept.
const maxPooled = 64 << 10

var (
	readBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	frames   = sync.Pool{}
)

func getReadBuf() *bytes.Buffer {
	b := readBufs.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putReadBuf(b *bytes.Buffer) {
	if b != nil && b.Cap() <= maxPooled {
		readBufs.Put(b)
	}
}

func getFrame(n int) []byte {
	if v, ok := frames.Get().(*[]byte); ok && cap(*v) >= n {
		return (*v)[:0]
	}
	return make([]byte, 0, max(n, 512))
}

// putFrame returns a written frame; the writer no longer needs it (the
// WebSocket library copies it into its buffer).
func putFrame(b []byte) {
	if cap(b) <= maxPooled {
		frames.Put(&b)
	}
}
