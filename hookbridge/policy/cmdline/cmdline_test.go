package cmdline

import (
	"reflect"
	"strings"
	"testing"
)

func texts(r Result) []string {
	var out []string
	for _, c := range r.Commands {
		out = append(out, c.Text())
	}
	return out
}

func TestParseCommands(t *testing.T) {
	tests := []struct {
		line   string
		cmds   []string
		opaque bool
	}{
		{"go test ./...", []string{"go test ./..."}, false},
		{"  ls   -la  ", []string{"ls -la"}, false},
		{"git status && rm -rf /tmp/x; echo done | tee out.log", []string{"git status", "rm -rf /tmp/x", "echo done", "tee out.log"}, false},
		{"echo 'a; b' \"c && d\"", []string{"echo 'a; b' 'c && d'"}, false},
		{"echo hi > out.txt 2>&1", []string{"echo hi"}, false},
		{"/bin/rm -rf x", []string{"rm -rf x"}, false},
		{"command -v rm", []string{"command -v rm"}, false},
		{"env -u X -C /tmp A=1 nice -5 rm x", []string{"env -u X -C /tmp A=1 nice -5 rm x", "nice -5 rm x", "rm x"}, false},
		{"env -iu X rm -rf y", []string{"env -iu X rm -rf y", "rm -rf y"}, false},
		{"env -uX -C/tmp rm y", []string{"env -uX -C/tmp rm y", "rm y"}, false},
		{"env -iS 'rm y'", []string{"env -iS 'rm y'"}, true},
		{"timeout --kill-after 5 10 rm x", []string{"timeout --kill-after 5 10 rm x", "rm x"}, false},
		{"nice --adjustment 5 rm x", []string{"nice --adjustment 5 rm x", "rm x"}, false},
		{"xargs -0n 1 rm -f", []string{"xargs -0n 1 rm -f", "rm -f {}"}, false},
		{"xargs -0I% sh -c 'rm %'", []string{"xargs -0I% sh -c 'rm %'", "sh -c 'rm %'", "rm %"}, false},
		{"xargs -n 1 -P4 rm -f", []string{"xargs -n 1 -P4 rm -f", "rm -f {}"}, false},
		{"xargs", []string{"xargs", "echo {}"}, false},
		{"find . -delete -exec chmod 600 {} \\;", []string{"find . -delete -exec chmod 600 {} ';'", "rm {}", "chmod 600 {}"}, false},
		{"sudo -E -u bob -- rm x", []string{"sudo -E -u bob -- rm x", "rm x"}, false},
		{"sudo -s 'rm x'", []string{"sudo -s 'rm x'", "rm x"}, false},
		{"/bin/bash -lc 'touch made.txt && cat ../secret'", []string{"bash -lc 'touch made.txt && cat ../secret'", "touch made.txt", "cat ../secret"}, false},
		{"bash script.sh arg", []string{"bash script.sh arg"}, false},
		{"f() { rm x; }; f", []string{"rm x", "f"}, false},
		{"export A=1 PATH=/x; local b", []string{"export A=1 PATH=/x", "local b"}, false},
		{"x=$(rm y)", []string{"rm y"}, false},
		{"[[ -f $(rm z) ]]", []string{"rm z"}, false},
		{"$x", nil, true},
		{"eval x", []string{"eval x"}, true},
		{"a | sh", []string{"a", "sh"}, true},
		{"sh -c", []string{"sh -c"}, true},
		{"alias ls=rm", []string{"alias ls=rm"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			r, err := Parse(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if got := texts(r); !reflect.DeepEqual(got, tt.cmds) {
				t.Errorf("commands = %q, want %q", got, tt.cmds)
			}
			if (len(r.Opaque) > 0) != tt.opaque {
				t.Errorf("opaque = %q", r.Opaque)
			}
		})
	}
}

func TestParsePathsAndDirs(t *testing.T) {
	r, err := Parse("cd sub && cat a.txt < in; cd .. && echo x >> log 2>/dev/null >&2; cd $D && cat c; pushd /abs && ls")
	if err != nil {
		t.Fatal(err)
	}
	want := []Path{
		{Path: "sub", Cd: true},
		{Dir: "sub", Path: "in"},
		{Dir: "sub", Path: "..", Cd: true},
		{Dir: "sub/..", Path: "log", Write: true},
		{Dir: "sub/..", Path: "/dev/null", Write: true},
		{Dir: "sub/..", DirUnknown: true, Path: "/abs", Cd: true},
	}
	if !reflect.DeepEqual(r.Paths, want) {
		t.Errorf("paths:\n got %+v\nwant %+v", r.Paths, want)
	}
	dirs := map[string]string{}
	for _, c := range r.Commands {
		d := c.Dir
		if c.DirUnknown {
			d = "?"
		}
		dirs[c.Name] = d
	}
	if dirs["cat"] != "?" || dirs["echo"] != "sub/.." || dirs["ls"] != "/abs" {
		t.Errorf("dirs %v", dirs)
	}
}

func TestParseHeredocPatch(t *testing.T) {
	r, err := Parse("cd pkg && apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: a\n+$x \\n\n*** End Patch\nEOF\ngit apply -p1 <<EOF\n--- a/x\n+++ b/x\nEOF")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Patches) != 2 || r.Patches[0].Dir != "pkg" || !strings.Contains(r.Patches[0].Text, "+$x \\n") || r.Patches[1].Program != "git apply" {
		t.Fatalf("patches %+v", r.Patches)
	}
}

func TestParseSyntaxError(t *testing.T) {
	if _, err := Parse("echo 'open"); err == nil {
		t.Fatal("no error")
	}
}

func TestParseDepthIsBounded(t *testing.T) {
	line := strings.Repeat("echo $(", 40) + "rm x" + strings.Repeat(")", 40)
	r, err := Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opaque) == 0 {
		t.Fatal("deep nesting is not opaque")
	}
	// sh -c nesting counts too (quoting grows 4 times a level: 12 is
	// enough to pass the bound of 16 with the substitutions).
	line = "rm x"
	for i := 0; i < 10; i++ {
		line = "sh -c " + quote(line)
	}
	r, err = Parse(strings.Repeat("echo $(", 8) + line + strings.Repeat(")", 8))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opaque) == 0 {
		t.Fatal("deep sh -c nesting is not opaque")
	}
}

func TestJoinArgv(t *testing.T) {
	argv := []string{"bash", "-lc", "rm -rf 'x y' && echo \"$HOME\""}
	r, err := Parse(JoinArgv(argv))
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(r); !reflect.DeepEqual(got, []string{JoinArgv(argv), "rm -rf 'x y'", "echo \"$HOME\""}) {
		t.Errorf("got %q", got)
	}
}
