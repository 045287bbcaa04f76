package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// AppendSessionUpdate appends the session-update frame of one event to buf,
// byte for byte what a json.Encoder with SetEscapeHTML(false) makes of the
// SessionUpdate (less its newline), without reflection or a second
// validation of data (the daemon's log holds only valid JSON). Replay and `logs` encode millions of events with it, which
// is why the frame is written by hand; TestAppendSessionUpdate holds it to
// json.Marshal.
//
// The frame never contains a newline byte, so frames can also travel one
// per line (SessionLogMediaType).
func AppendSessionUpdate(buf []byte, sessionID string, seq int64, ts time.Time, kind string, data json.RawMessage) []byte {
	buf = append(buf, `{"type":"session-update","session_id":`...)
	buf = appendString(buf, sessionID)
	buf = append(buf, `,"seq":`...)
	buf = strconv.AppendInt(buf, seq, 10)
	buf = append(buf, `,"ts":"`...)
	buf = ts.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","kind":`...)
	buf = appendString(buf, kind)
	buf = append(buf, `,"data":`...)
	switch {
	case len(data) == 0:
		buf = append(buf, "null"...)
	case isCompact(data):
		buf = append(buf, data...)
	default:
		// Valid JSON with whitespace between tokens: json.Marshal
		// compacts it, and so must we (a newline would end a line).
		var b bytes.Buffer
		if json.Compact(&b, data) == nil {
			buf = append(buf, b.Bytes()...)
		} else {
			buf = append(buf, "null"...)
		}
	}
	return append(buf, '}')
}

// AppendSessionUpdatesHead starts a session-updates frame in buf: its
// updates (AppendSessionUpdate) follow, comma-separated, then "]}".
func AppendSessionUpdatesHead(buf []byte, sessionID string) []byte {
	buf = append(buf, `{"type":"session-updates","session_id":`...)
	buf = appendString(buf, sessionID)
	return append(buf, `,"updates":[`...)
}

// isCompact reports whether data has no whitespace outside its strings, as
// json.Marshal leaves it; the common case (no space, tab or line break at
// all) is one scan.
func isCompact(data []byte) bool {
	if !bytes.ContainsAny(data, " \t\r\n") {
		return true
	}
	var b bytes.Buffer
	if json.Compact(&b, data) != nil {
		return false
	}
	return b.Len() == len(data)
}

// appendString appends s as a JSON string, escaped as encoding/json does
// without HTML escaping. Ids and kinds are plain ASCII, the fast path.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.Encode(s)
			return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// SessionLogMediaType is the content type of a session's log read as one
// stream (GET /api/sessions/{id}/events/stream): one session-update frame
// a line, each ended by a newline.
const SessionLogMediaType = "application/x-ndjson"
