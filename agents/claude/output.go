package claude

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// maxKeptOutput bounds one tool output kept as evidence.
const maxKeptOutput = 64 << 20

// persisted is how Claude Code tells the model that a tool's output was
// too large to show: the model gets a preview, the whole output is in a
// file under the agent's own home.
var persisted = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`Full output saved to: (\S+)`) })

// keepFullOutput keeps a tool's full output in the session's state
// directory when the model was shown less than all of it: the file Claude
// Code saved the output to, or the stdout and stderr of tool_use_result
// when they hold more than the preview. The agent's own copy lives in its
// home, which it may clean or rewrite; reeve's copy is the evidence.
// Returns the kept file and its size, or "" when nothing was cut.
func (m *mapper) keepFullOutput(toolUseID, preview string, result json.RawMessage) (string, int64) {
	if m.stateDir == "" || toolUseID == "" || strings.ContainsAny(toolUseID, `/\`) {
		return "", 0
	}
	dst := filepath.Join(m.stateDir, "outputs", toolUseID+".txt")
	if mt := persisted().FindStringSubmatch(preview); mt != nil {
		if n, err := copyBounded(mt[1], dst); err == nil {
			return dst, n
		}
	}
	var r struct {
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	}
	if json.Unmarshal(result, &r) != nil || len(r.Stdout)+len(r.Stderr) <= len(preview) {
		return "", 0
	}
	full := r.Stdout
	if r.Stderr != "" {
		full += "\n[stderr]\n" + r.Stderr
	}
	if err := writePrivate(dst, []byte(full)); err != nil {
		return "", 0
	}
	return dst, int64(len(full))
}

func copyBounded(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0, os.ErrInvalid
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(in, maxKeptOutput))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func writePrivate(path string, b []byte) error {
	if len(b) > maxKeptOutput {
		b = b[:maxKeptOutput]
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
