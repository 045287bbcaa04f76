package discovery

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// codexLine is a line of a Codex rollout file: a type and a payload. The
// first is session_meta (id, cwd, timestamp); the prompt follows as an
// event_msg (user_message in older versions, item_completed of a
// UserMessage in newer ones) and as a user response_item.
type codexLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

type codexMeta struct {
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Cwd       string `json:"cwd"`
}

type codexPayload struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`    // response_item message
	Content json.RawMessage `json:"content"` // response_item message
	Message string          `json:"message"` // event_msg user_message
	Item    *struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	} `json:"item"` // event_msg item_completed
}

// readCodex reads $CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<id>.jsonl. ok
// is false unless its first line is a session_meta with an id.
func readCodex(path string) (Session, bool) {
	s := Session{Agent: AgentCodex, Path: path}
	first, valid := true, false
	var fallbackTitle string // from a user response_item, when no event says it
	st, err := head(path, func(raw []byte) bool {
		var l codexLine
		ok := len(raw) > 0 && json.Unmarshal(raw, &l) == nil
		if first {
			first = false
			var m codexMeta
			if !ok || l.Type != "session_meta" || json.Unmarshal(l.Payload, &m) != nil || m.ID == "" {
				return false
			}
			valid = true
			s.ID, s.Dir = m.ID, m.Cwd
			if s.StartedAt = parseTime(m.Timestamp); s.StartedAt.IsZero() {
				s.StartedAt = parseTime(l.Timestamp)
			}
			return true
		}
		if !ok {
			return true
		}
		var p codexPayload
		if json.Unmarshal(l.Payload, &p) != nil {
			return true
		}
		switch {
		case l.Type == "event_msg" && p.Type == "user_message" && !isSystemText(p.Message):
			s.Title = title(p.Message)
		case l.Type == "event_msg" && p.Type == "item_completed" && p.Item != nil && p.Item.Type == "UserMessage":
			s.Title = title(firstText(p.Item.Content))
		case l.Type == "response_item" && p.Type == "message" && p.Role == "user" && fallbackTitle == "":
			fallbackTitle = firstText(p.Content)
		}
		return s.Title == ""
	})
	if err != nil || !valid {
		return Session{}, false
	}
	if !strings.HasSuffix(strings.TrimSuffix(filepath.Base(path), ".jsonl"), s.ID) {
		return Session{}, false // not the file of the session it claims
	}
	if s.Title == "" {
		s.Title = title(fallbackTitle)
	}
	s.UpdatedAt = st.ModTime().UTC()
	if s.StartedAt.IsZero() {
		s.StartedAt = s.UpdatedAt
	}
	s.StartedAt = s.StartedAt.UTC()
	return s, true
}
