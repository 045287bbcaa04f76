package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// A man page escapes what roff would read as its own (hyphens, backslashes,
// a line starting with a dot), lists visible flags only, and links its
// parent and children.
func TestManPage(t *testing.T) {
	root := &cobra.Command{Use: "reeve"}
	root.PersistentFlags().String("home", "", "daemon home")
	c := &cobra.Command{Use: "do-it ARG", Short: "Do it", Long: "First paragraph with a back\\slash.\n\n.reeve/policy.yaml is read\n\n  indented -x line", Example: "  reeve do-it .", Run: func(*cobra.Command, []string) {}}
	c.Flags().BoolP("force", "f", false, "force it")
	c.Flags().Int("n", 3, "how many")
	c.Flags().String("secret", "", "hidden")
	c.Flags().MarkHidden("secret")
	sub := &cobra.Command{Use: "sub", Short: "Sub", Run: func(*cobra.Command, []string) {}}
	c.AddCommand(sub)
	root.AddCommand(c)
	var b bytes.Buffer
	writeMan(&b, c, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	page := b.String()
	for _, want := range []string{
		".TH \"REEVE\" \"1\" \"Jan 2026\"", "reeve\\-do\\-it \\- Do it", "back\\eslash",
		"\\&.reeve/policy.yaml is read", ".nf\n  indented \\-x line\n.fi",
		"\\fB\\-f\\fP, \\fB\\-\\-force\\fP\n", "\\fB\\-\\-n\\fP=int\nhow many (default 3)",
		"OPTIONS INHERITED FROM PARENT COMMANDS", "\\fB\\-\\-home\\fP=string",
		".SH EXAMPLE", "\\fBreeve\\fP(1),\n\\fBreeve\\-do\\-it\\-sub\\fP(1)\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("man page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "secret") {
		t.Errorf("a hidden flag is in the man page:\n%s", page)
	}
}
