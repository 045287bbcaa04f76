package patch

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseEnvelope(t *testing.T) {
	text := `*** Begin Patch
*** Add File: docs/new.md
+# New
+
*** Delete File: old.txt
*** Update File: src/a.go
*** Move to: src/b.go
@@ func main() {
-	old()
+	new()
 }
*** End of File
*** Update File: c.go
 context
-x
+y
*** End Patch`
	files, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{{"docs/new.md", Add}, {"old.txt", Delete}, {"src/a.go", Update}, {"src/b.go", Move}, {"c.go", Update}}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files = %+v", files)
	}
}

func TestParseUnified(t *testing.T) {
	text := `diff --git a/x.go b/x.go
index 1..2 100644
--- a/x.go
+++ b/x.go
@@ -1,3 +1,3 @@
 a
-b
+c
 d
\ No newline at end of file
diff --git a/old b/new
similarity index 90%
rename from old
rename to new
--- /dev/null	2024-01-01 00:00:00
+++ "b/sp ace"
@@ -0,0 +1 @@
+x
`
	files, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{{"x.go", Update}, {"old", Delete}, {"new", Move}, {"sp ace", Add}}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files = %+v", files)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, text := range map[string]string{
		"empty":                "",
		"prose":                "please apply this",
		"no end":               "*** Begin Patch\n*** Add File: a\n+x\n",
		"unknown header":       "*** Begin Patch\n*** Rename File: a\n*** End Patch",
		"add without plus":     "*** Begin Patch\n*** Add File: a\nx\n*** End Patch",
		"no file name":         "*** Begin Patch\n*** Delete File: \n*** End Patch",
		"update without hunk":  "*** Begin Patch\n*** Update File: a\n*** End Patch",
		"move without update":  "*** Begin Patch\n*** Move to: b\n*** End Patch",
		"names nothing":        "*** Begin Patch\n*** End Patch",
		"hunk too short":       "--- a\n+++ a\n@@ -1,3 +1,3 @@\n a\n",
		"hunk too long":        "--- a\n+++ a\n@@ -1 +1 @@\n-a\n+b\n-c\n+d\n",
		"bad hunk header":      "--- a\n+++ a\n@@ nonsense @@\n",
		"minus without plus":   "--- a\nhello\n",
		"hunk without headers": "@@ -1 +1 @@\n-a\n+b\n",
	} {
		if files, err := Parse(text); err == nil {
			t.Errorf("%s: parsed as %+v", name, files)
		} else if !strings.HasPrefix(err.Error(), "patch") {
			t.Errorf("%s: error %q does not say it is the patch", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch")
	f.Add("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
	f.Fuzz(func(t *testing.T, text string) {
		files, err := Parse(text)
		if err == nil && len(files) == 0 {
			t.Fatal("no error and no file")
		}
	})
}
