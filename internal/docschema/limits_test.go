package docschema

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// aliasBomb is a small document whose nested aliases expand to 9^9 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("version: 1\na: &a [x, x, x, x, x, x, x, x, x]\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		fmt.Fprintf(&b, "%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	return b.String()
}

func TestParseYAMLRefusesAliasBomb(t *testing.T) {
	src := aliasBomb()
	if len(src) > 600 {
		t.Fatalf("the bomb is %d bytes; it is meant to be small", len(src))
	}
	_, problems := ParseYAML("bomb.yaml", []byte(src))
	if len(problems) != 1 {
		t.Fatalf("problems = %v", problems)
	}
	p := problems[0]
	// The first alias whose expansion crossed the budget is on line 4 or
	// later (c: ...); line 3 (b) expands to 81 values only.
	if p.File != "bomb.yaml" || p.Line < 3 || p.Column == 0 || !strings.Contains(p.Message, "aliases expand to more than") {
		t.Fatalf("problem = %+v", p)
	}
	if !strings.HasPrefix(p.String(), fmt.Sprintf("bomb.yaml:%d:", p.Line)) {
		t.Errorf("not located: %s", p)
	}
}

func TestParseYAMLKeepsModestAliases(t *testing.T) {
	src := "base: &base {a: 1, b: [x, y]}\none: *base\ntwo: *base\n"
	d, problems := ParseYAML("f.yaml", []byte(src))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	m := d.Value.(map[string]any)
	if m["two"].(map[string]any)["a"] != int64(1) {
		t.Errorf("value %v", m)
	}
	if p := d.Pos("/two"); p.Line != 3 {
		t.Errorf("alias position %+v", p)
	}
}

func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "policy.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(zero); !errors.Is(err, ErrNotRegular) {
		t.Errorf("/dev/zero: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo); !errors.Is(err, ErrNotRegular) {
		t.Errorf("fifo: %v", err)
	}
	if _, err := ReadFile(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("big: %v", err)
	}
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(link); err != nil || string(b) != "version: 1\n" {
		t.Errorf("link to a regular file: %q %v", b, err)
	}
}
