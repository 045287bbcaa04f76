package discovery

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// geminiLine is a line of a Gemini CLI chat file: the first is the
// session's header (sessionId, startTime, kind), then messages ({id, type,
// content}) and {"$set": ...} updates. A resumed run appends a new header
// with the same sessionId.
type geminiLine struct {
	SessionID string          `json:"sessionId"`
	StartTime string          `json:"startTime"`
	Kind      string          `json:"kind"`
	Type      string          `json:"type"`
	Content   json.RawMessage `json:"content"`
}

// readGemini reads <gemini home>/tmp/<project>/chats/session-<time>-<id8>.jsonl.
// The project's directory is in <project>/.project_root. ok is false
// unless the first line is a main session's header whose id the file name
// carries.
func readGemini(path string) (Session, bool) {
	s := Session{Agent: AgentGemini, Path: path}
	first, valid := true, false
	st, err := head(path, func(raw []byte) bool {
		var l geminiLine
		ok := len(raw) > 0 && json.Unmarshal(raw, &l) == nil
		if first {
			first = false
			if !ok || l.SessionID == "" || (l.Kind != "" && l.Kind != "main") {
				return false // a subagent's chat is part of its parent's session
			}
			valid = true
			s.ID, s.StartedAt = l.SessionID, parseTime(l.StartTime)
			return true
		}
		if ok && l.Type == "user" {
			s.Title = title(geminiText(l.Content))
		}
		return s.Title == ""
	})
	if err != nil || !valid {
		return Session{}, false
	}
	id8 := s.ID
	if len(id8) > 8 {
		id8 = id8[:8]
	}
	if !strings.HasSuffix(strings.TrimSuffix(filepath.Base(path), ".jsonl"), "-"+id8) {
		return Session{}, false
	}
	root, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(path)), ".project_root"))
	if err != nil {
		return Session{}, false
	}
	s.Dir = strings.TrimSpace(string(root))
	s.UpdatedAt = st.ModTime().UTC()
	if s.StartedAt.IsZero() {
		s.StartedAt = s.UpdatedAt
	}
	s.StartedAt = s.StartedAt.UTC()
	return s, true
}

// geminiText is the first typed text of a message's parts (which, unlike
// Claude's blocks, name no type).
func geminiText(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return firstText(raw)
	}
	for _, p := range parts {
		if !isSystemText(p.Text) {
			return p.Text
		}
	}
	return ""
}

// mergeGemini makes one session of two chat files of it: started at the
// first, updated (and found) at the latest, titled by the first typed
// prompt.
func mergeGemini(a, b Session) Session {
	first, last := a, b
	if b.StartedAt.Before(a.StartedAt) {
		first, last = b, a
	}
	out := last
	out.StartedAt = first.StartedAt
	if first.Title != "" {
		out.Title = first.Title
	}
	if a.UpdatedAt.After(b.UpdatedAt) {
		out.UpdatedAt, out.Path = a.UpdatedAt, a.Path
	} else {
		out.UpdatedAt, out.Path = b.UpdatedAt, b.Path
	}
	return out
}
