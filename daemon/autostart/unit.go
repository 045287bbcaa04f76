package autostart

import (
	"fmt"
	"strings"
)

// The unit texts are rendered here rather than by the service library's
// templates, so that `service install --print`, an install into a root and
// an install on the live system write the same bytes, and the tests check
// those bytes. The library receives them as its custom script, which holds
// no template action.

// systemdUnit renders the systemd unit. The supervisor runs in the
// foreground under the unit with the home's persisted launch settings;
// its output goes to the journal.
func systemdUnit(o Options) string {
	var b strings.Builder
	b.WriteString("# Written by `reeve service install`; `reeve service uninstall` removes it.\n")
	b.WriteString("[Unit]\n")
	fmt.Fprintf(&b, "Description=reeve daemon (home %s)\n", systemdText(o.Home))
	if o.System {
		b.WriteString("Wants=network-online.target\nAfter=network-online.target\n")
	}
	// At most 10 restarts in 5 minutes, then systemd gives up rather than
	// spinning on a daemon that cannot start.
	b.WriteString("StartLimitIntervalSec=300\nStartLimitBurst=10\n\n")
	b.WriteString("[Service]\nType=simple\n")
	fmt.Fprintf(&b, "ExecStart=%s\n", systemdCommandLine(o.Command()))
	if o.System && o.UserName != "" {
		fmt.Fprintf(&b, "User=%s\n", o.UserName)
	}
	// The supervisor drains its worker on SIGTERM; mixed sends it only to
	// the supervisor and kills what is left after the timeout.
	b.WriteString("KillMode=mixed\nTimeoutStopSec=30\n")
	b.WriteString("Restart=on-failure\nRestartSec=5\n")
	// Exit 5 is a daemon already running from the home (started by hand):
	// restarting cannot help.
	b.WriteString("RestartPreventExitStatus=5\n")
	b.WriteString("SyslogIdentifier=reeve\n\n")
	b.WriteString("[Install]\n")
	if o.System {
		b.WriteString("WantedBy=multi-user.target\n")
	} else {
		b.WriteString("WantedBy=default.target\n")
	}
	return b.String()
}

// systemdCommandLine quotes argv for ExecStart: each word in double quotes
// when it needs them, with the specifiers (%) and variables ($) systemd
// would expand doubled.
func systemdCommandLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = systemdWord(a)
	}
	return strings.Join(words, " ")
}

func systemdWord(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	if s != "" && !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// systemdText is free text in a unit (Description): specifiers escaped.
func systemdText(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// launchdPlist renders the launchd property list: run at load, restarted
// when it exits unsuccessfully, output to the home's daemon log.
func launchdPlist(o Options) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by reeve service install; reeve service uninstall removes it. -->
<plist version="1.0">
<dict>
`)
	fmt.Fprintf(&b, "  <key>Label</key>\n  <string>%s</string>\n", xmlText(o.label()))
	b.WriteString("  <key>ProgramArguments</key>\n  <array>\n")
	for _, a := range o.Command() {
		fmt.Fprintf(&b, "    <string>%s</string>\n", xmlText(a))
	}
	b.WriteString("  </array>\n")
	if o.System && o.UserName != "" {
		fmt.Fprintf(&b, "  <key>UserName</key>\n  <string>%s</string>\n", xmlText(o.UserName))
	}
	b.WriteString("  <key>RunAtLoad</key>\n  <true/>\n")
	b.WriteString("  <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n")
	b.WriteString("  <key>ThrottleInterval</key>\n  <integer>5</integer>\n")
	log := o.Home + "/daemon.log"
	fmt.Fprintf(&b, "  <key>StandardOutPath</key>\n  <string>%s</string>\n", xmlText(log))
	fmt.Fprintf(&b, "  <key>StandardErrorPath</key>\n  <string>%s</string>\n", xmlText(log))
	b.WriteString("</dict>\n</plist>\n")
	return b.String()
}

func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s)
}
