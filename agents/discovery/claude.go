package discovery

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// claudeLine is what a Claude Code transcript line may carry. The first
// lines are queue operations and the first user message, each with
// sessionId, cwd and timestamp.
type claudeLine struct {
	Type        string `json:"type"`
	SessionID   string `json:"sessionId"`
	Cwd         string `json:"cwd"`
	Timestamp   string `json:"timestamp"`
	IsSidechain bool   `json:"isSidechain"`
	IsMeta      bool   `json:"isMeta"`
	Operation   string `json:"operation"` // queue-operation
	Content     string `json:"content"`   // queue-operation enqueue: the prompt
	Message     *struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// readClaude reads <projects>/<dir>/<session_id>.jsonl. ok is false for a
// file that is not a session transcript (no session id in its head, a
// subagent's sidechain, unreadable).
func readClaude(path string) (Session, bool) {
	s := Session{Agent: AgentClaude, Path: path}
	var queued string // a prompt seen in a queue operation, until the user line
	parsed := false
	st, err := head(path, func(raw []byte) bool {
		var l claudeLine
		if len(raw) == 0 || json.Unmarshal(raw, &l) != nil {
			return true // a torn or foreign line; the others may still do
		}
		parsed = true
		if l.IsSidechain {
			s.ID = "" // a subagent's transcript, not a session
			return false
		}
		if s.ID == "" && l.SessionID != "" {
			s.ID = l.SessionID
		}
		if s.Dir == "" && l.Cwd != "" {
			s.Dir = l.Cwd
		}
		if t := parseTime(l.Timestamp); !t.IsZero() && (s.StartedAt.IsZero() || t.Before(s.StartedAt)) {
			s.StartedAt = t
		}
		switch {
		case l.Type == "queue-operation" && l.Operation == "enqueue" && queued == "" && !isSystemText(l.Content):
			queued = l.Content
		case l.Type == "user" && !l.IsMeta && l.Message != nil && s.Title == "":
			s.Title = title(firstText(l.Message.Content))
		}
		return s.ID == "" || s.Dir == "" || s.Title == ""
	})
	if err != nil || !parsed || s.ID == "" {
		return Session{}, false
	}
	// The file is named after the session; a mismatch means it is not one.
	if name := strings.TrimSuffix(filepath.Base(path), ".jsonl"); name != s.ID {
		return Session{}, false
	}
	if s.Title == "" {
		s.Title = title(queued)
	}
	s.UpdatedAt = st.ModTime().UTC()
	if s.StartedAt.IsZero() {
		s.StartedAt = s.UpdatedAt
	}
	s.StartedAt = s.StartedAt.UTC()
	return s, true
}
