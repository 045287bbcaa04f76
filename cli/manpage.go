package cli

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Man pages are written here, in roff, rather than by cobra/doc: that
// package converts help text from Markdown through go-md2man and
// blackfriday, whose package initialisation (760 allocations, 210 KB) every
// start of reeve paid for, though only `reeve install` writes man pages.
// Our help text is plain text, so nothing needs converting: paragraphs,
// flags and the examples, escaped for roff.

// writeMan renders c's man page, section 1.
func writeMan(b *bytes.Buffer, c *cobra.Command, date time.Time) {
	path := c.CommandPath()
	name := strings.ReplaceAll(path, " ", "-")
	fmt.Fprintf(b, ".TH \"REEVE\" \"1\" \"%s\" \"reeve\" \"reeve manual\"\n", date.Format("Jan 2006"))
	b.WriteString(".nh\n.ad l\n")
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(b, "%s \\- %s\n", roff(name), roff(c.Short))
	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(b, "\\fB%s\\fP\n", roff(c.UseLine()))
	b.WriteString(".SH DESCRIPTION\n")
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	paragraphs(b, desc)
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS\n")
		flags(b, fs)
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		b.WriteString(".SH OPTIONS INHERITED FROM PARENT COMMANDS\n")
		flags(b, fs)
	}
	if c.Example != "" {
		b.WriteString(".SH EXAMPLE\n.PP\n.RS\n.nf\n")
		for _, l := range strings.Split(strings.TrimRight(c.Example, "\n"), "\n") {
			b.WriteString(roffLine(l) + "\n")
		}
		b.WriteString(".fi\n.RE\n")
	}
	var see []string
	if p := c.Parent(); p != nil {
		see = append(see, strings.ReplaceAll(p.CommandPath(), " ", "-"))
	}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			see = append(see, strings.ReplaceAll(sub.CommandPath(), " ", "-"))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range see {
			sep := ","
			if i == len(see)-1 {
				sep = ""
			}
			fmt.Fprintf(b, "\\fB%s\\fP(1)%s\n", roff(s), sep)
		}
	}
}

// paragraphs writes text, its blank-line separated paragraphs as such and
// indented lines (lists, commands) as they are.
func paragraphs(b *bytes.Buffer, text string) {
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		b.WriteString(".PP\n")
		lines := strings.Split(para, "\n")
		literal := false
		for _, l := range lines {
			if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
				literal = true
			}
		}
		if literal {
			b.WriteString(".nf\n")
		}
		for _, l := range lines {
			b.WriteString(roffLine(l) + "\n")
		}
		if literal {
			b.WriteString(".fi\n")
		}
	}
}

func flags(b *bytes.Buffer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		b.WriteString(".TP\n")
		name := "\\fB\\-\\-" + roff(f.Name) + "\\fP"
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			name = "\\fB\\-" + roff(f.Shorthand) + "\\fP, " + name
		}
		if t := f.Value.Type(); t != "bool" {
			name += "=" + roff(t)
		}
		b.WriteString(name + "\n")
		usage := f.Usage
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		b.WriteString(roffLine(usage) + "\n")
	})
}

// roff escapes text for roff: backslashes and hyphens.
func roff(s string) string {
	return strings.NewReplacer(`\`, `\e`, `-`, `\-`).Replace(s)
}

// roffLine escapes one line, which must not start with a control character.
func roffLine(s string) string {
	s = roff(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
