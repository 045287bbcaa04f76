// Package discovery finds coding-agent sessions started outside reeve, from
// the transcripts the agents keep themselves: Claude Code's
// ~/.claude/projects/<dir>/<session_id>.jsonl and Codex's
// $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl and Gemini
// CLI's ~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl. It reads
// only the head of each file, so huge transcripts cost little, and skips
// files it cannot make sense of.
package discovery

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Agent ids of discovered sessions, as the adapters name them.
const (
	AgentClaude = "claude"
	AgentCodex  = "codex"
	AgentGemini = "gemini"
)

// Bounds on reading one transcript: its first lines carry everything a
// listing needs, and some lines (system prompts, tool outputs) are huge.
const (
	maxHeadBytes = 2 << 20 // bytes read from the start of a file
	maxHeadLines = 200
	maxTitle     = 120 // runes
)

// Session is a session found in an agent's transcripts.
type Session struct {
	Agent     string    `json:"agent"` // AgentClaude, AgentCodex or AgentGemini
	ID        string    `json:"id"`    // the agent's own id: Claude's session_id, Codex's thread_id, Gemini's sessionId
	Dir       string    `json:"dir"`   // the working directory it ran in
	Title     string    `json:"title,omitempty"`
	Path      string    `json:"path"` // the transcript file
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"` // the transcript's last modification
}

// Options says where to look.
type Options struct {
	// Home is the user's home directory; default os.UserHomeDir().
	Home string
	// ClaudeDir is Claude Code's config directory; default Home/.claude.
	ClaudeDir string
	// CodexHome is Codex's home; default Home/.codex.
	CodexHome string
	// GeminiDir is Gemini CLI's directory; default Home/.gemini
	// ($GEMINI_CLI_HOME/.gemini when that is set).
	GeminiDir string
	// Exclude, when set, drops sessions it returns true for, e.g. the ones
	// reeve itself ran (by the agent session id their turns reported).
	Exclude func(agent, id string) bool
}

// Scan lists the sessions in the agents' transcripts, most recently
// updated first. Missing directories mean no sessions; unreadable or
// malformed files are skipped. It fails only when ctx ends.
func Scan(ctx context.Context, o Options) ([]Session, error) {
	if o.Home == "" {
		o.Home, _ = os.UserHomeDir()
	}
	if o.ClaudeDir == "" && o.Home != "" {
		o.ClaudeDir = filepath.Join(o.Home, ".claude")
	}
	if o.CodexHome == "" && o.Home != "" {
		o.CodexHome = filepath.Join(o.Home, ".codex")
	}
	if o.GeminiDir == "" && o.Home != "" {
		o.GeminiDir = filepath.Join(o.Home, ".gemini")
	}
	var out []Session
	add := func(s Session, ok bool) {
		if ok && (o.Exclude == nil || !o.Exclude(s.Agent, s.ID)) {
			out = append(out, s)
		}
	}

	if o.ClaudeDir != "" {
		files, _ := filepath.Glob(filepath.Join(o.ClaudeDir, "projects", "*", "*.jsonl"))
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			add(readClaude(f))
		}
	}
	if o.CodexHome != "" {
		files, _ := filepath.Glob(filepath.Join(o.CodexHome, "sessions", "[0-9]*", "[0-9]*", "[0-9]*", "rollout-*.jsonl"))
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			add(readCodex(f))
		}
	}
	if o.GeminiDir != "" {
		files, _ := filepath.Glob(filepath.Join(o.GeminiDir, "tmp", "*", "chats", "session-*.jsonl"))
		// A resumed session may start a new chat file (its name holds the
		// minute it was opened): one session, several files.
		byID := map[string]Session{}
		var ids []string
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s, ok := readGemini(f)
			if !ok {
				continue
			}
			prev, seen := byID[s.ID]
			if !seen {
				ids = append(ids, s.ID)
				byID[s.ID] = s
				continue
			}
			byID[s.ID] = mergeGemini(prev, s)
		}
		for _, id := range ids {
			add(byID[id], true)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].UpdatedAt.Equal(out[j].UpdatedAt) {
			return out[i].UpdatedAt.After(out[j].UpdatedAt)
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// head calls fn with each complete line in the first maxHeadBytes (and
// maxHeadLines) of the file, until fn returns false. A line cut by the
// limit, or not yet terminated (a write in progress), is ignored.
func head(path string, fn func(line []byte) bool) (os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	r := bufio.NewReaderSize(io.LimitReader(f, maxHeadBytes), 64<<10)
	var long []byte
	for n := 0; n < maxHeadLines; {
		chunk, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		if err != nil { // EOF or the byte limit: the rest is not a whole line
			return st, nil
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		n++
		if !fn(bytes.TrimSpace(line)) {
			break
		}
	}
	return st, nil
}

// title makes a one-line title of a prompt.
func title(s string) string {
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	if utf8.RuneCountInString(s) <= maxTitle {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:maxTitle-1])) + "…"
}

// parseTime reads an RFC 3339 timestamp; zero when absent or malformed.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// isSystemText tells injected context (reminders, environment blocks,
// instructions) from what a person typed.
func isSystemText(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || strings.HasPrefix(s, "<") || strings.HasPrefix(s, "Caveat:") || strings.HasPrefix(s, "# AGENTS.md")
}

// firstText is the first person-typed text of a message content: a string,
// or a list of blocks with "text".
func firstText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if isSystemText(s) {
			return ""
		}
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	for _, b := range blocks {
		if (b.Type == "text" || b.Type == "input_text") && !isSystemText(b.Text) {
			return b.Text
		}
	}
	return ""
}
