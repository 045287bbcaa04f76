package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// trickle sends its input one byte at a time, slowly, and never ends.
type trickle struct{ every time.Duration }

func (t trickle) Read(p []byte) (int, error) {
	time.Sleep(t.every)
	p[0] = ' '
	return 1, nil
}

// `reeve hook --timeout N` answers within N seconds whatever stdin does:
// an agent that never closes it, or sends it a byte at a time, gets a deny
// on time instead of a hook that hangs.
func TestHookTimeoutCoversReadingStdin(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	for name, in := range map[string]io.Reader{
		"stdin never closed": pr,
		"stdin trickling":    trickle{every: 50 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			env := &Env{In: in, Out: &out, Err: &errb, Getenv: func(string) string { return "" }}
			done := make(chan int, 1)
			began := time.Now()
			go func() {
				done <- Execute(context.Background(), env, []string{"hook", "PreToolUse", "--home", t.TempDir(), "--session", "s1", "--timeout", "1"})
			}()
			select {
			case code := <-done:
				if code != ExitOK {
					t.Fatalf("exit %d, stderr %q", code, errb.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the hook is still waiting for its input a minute after a 1s timeout")
			}
			var ans struct {
				HookSpecificOutput struct{ PermissionDecision, PermissionDecisionReason string }
			}
			if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			o := ans.HookSpecificOutput
			if o.PermissionDecision != "deny" || !strings.Contains(o.PermissionDecisionReason, "within 1s") {
				t.Fatalf("answer %+v", o)
			}
			t.Logf("denied after %v", time.Since(began).Round(time.Millisecond))
		})
	}
}
