package policy

import (
	"reflect"
	"testing"
)

func TestParseShell(t *testing.T) {
	tests := []struct {
		line     string
		segments []string
		opaque   bool
		paths    []shellPath
	}{
		{"go test ./...", []string{"go test ./..."}, false, []shellPath{{"", "./..."}}},
		{"  ls   -la  ", []string{"ls -la"}, false, nil},
		{"git status && rm -rf /tmp/x; echo done | tee out.log", []string{"git status", "rm -rf /tmp/x", "echo done", "tee out.log"}, false, []shellPath{{"", "/tmp/x"}, {"", "out.log"}}},
		{"echo 'a; b' \"c && d\"", []string{"echo 'a; b' \"c && d\""}, false, nil},
		{"echo hi > out.txt 2>&1", []string{"echo hi > out.txt 2>&1"}, false, []shellPath{{"", "out.txt"}}},
		{"cat <input 2>errors &>all", []string{"cat < input 2> errors &> all"}, false, []shellPath{{"", "input"}, {"", "errors"}, {"", "all"}}},
		{"echo $(rm -rf /)", []string{"echo", "rm -rf /"}, true, []shellPath{{"", "/"}}},
		{"echo `whoami`", []string{"echo", "whoami"}, true, nil},
		{"diff <(ls a) b", []string{"diff", "ls a", "b"}, true, nil},
		{"cat \"$HOME/.ssh/id_rsa\" *.pem", []string{"cat \"$HOME/.ssh/id_rsa\" *.pem"}, false, nil},
		{"/bin/bash -lc 'touch made.txt && cat ../secret'", []string{"touch made.txt", "cat ../secret"}, false, []shellPath{{"", "made.txt"}, {"", "../secret"}}},
		{"cd sub && cat a.txt; cd .. && cat b.txt", []string{"cd sub", "cat a.txt", "cd ..", "cat b.txt"}, false, []shellPath{{"", "sub"}, {"sub", "a.txt"}, {"sub", ".."}, {"sub/..", "b.txt"}}},
		{"cd $DIR && cat a.txt /etc/hosts", []string{"cd $DIR", "cat a.txt /etc/hosts"}, false, []shellPath{{"", "/etc/hosts"}}},
		{"FOO=1 BAR=2 make build.out", []string{"FOO=1 BAR=2 make build.out"}, false, []shellPath{{"", "build.out"}}},
		{"echo a\\ b.txt", []string{"echo a\\ b.txt"}, false, []shellPath{{"", "a b.txt"}}},
		{"echo 'unterminated", []string{"echo 'unterminated"}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			sc := parseShell(tt.line)
			if !reflect.DeepEqual(sc.segments, tt.segments) {
				t.Errorf("segments = %q, want %q", sc.segments, tt.segments)
			}
			if sc.opaque != tt.opaque {
				t.Errorf("opaque = %v, want %v", sc.opaque, tt.opaque)
			}
			if !reflect.DeepEqual(sc.paths, tt.paths) {
				t.Errorf("paths = %q, want %q", sc.paths, tt.paths)
			}
		})
	}
}
