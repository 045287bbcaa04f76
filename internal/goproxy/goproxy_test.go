package goproxy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"reeve.dev/reeve/internal/goproxy"
	"reeve.dev/reeve/internal/goproxy/goproxytest"
)

const mod = "example.test/tool"

func files(body string) map[string]string {
	return map[string]string{"go.mod": "module " + mod + "\n\ngo 1.22\n", "main.go": "package main\n\nfunc main() { println(" + body + ") }\n"}
}

// The newest version comes from @latest; a download is checked against
// the checksum database; a tampered zip, an unknown version and switched
// off checking are refused.
func TestLatestAndVerifiedDownload(t *testing.T) {
	f := goproxytest.New(t)
	f.Publish(mod, "v1.0.0", files(`"one"`))
	f.Publish(mod, "v1.1.0", files(`"two"`))
	o := goproxy.Options{Module: mod, Proxy: "direct," + f.Proxy(), SumDB: f.SumDB}
	ctx := context.Background()
	in, err := goproxy.Latest(ctx, o)
	if err != nil || in.Version != "v1.1.0" {
		t.Fatalf("latest: %+v %v", in, err)
	}
	zip, sum, err := goproxy.Download(ctx, o, "v1.1.0", t.TempDir())
	if err != nil || zip == "" || sum == "" {
		t.Fatalf("download: %v", err)
	}

	f.Tamper(mod, "v1.1.0", files(`"evil"`))
	if _, _, err := goproxy.Download(ctx, o, "v1.1.0", t.TempDir()); !errors.Is(err, goproxy.ErrChecksum) {
		t.Fatalf("tampered zip: %v", err)
	}
	if _, _, err := goproxy.Download(ctx, o, "v9.0.0", t.TempDir()); err == nil {
		t.Fatal("downloaded a version nobody published")
	}
	for _, bad := range []goproxy.Options{
		{Module: mod, Proxy: f.Proxy(), SumDB: "off"},
		{Module: mod, Proxy: f.Proxy(), SumDB: f.SumDB, NoSumDB: "example.test"},
		{Module: mod, Proxy: "direct", SumDB: f.SumDB},
		{Module: mod, Proxy: "off", SumDB: f.SumDB},
	} {
		if _, _, err := goproxy.Download(ctx, bad, "v1.0.0", t.TempDir()); !errors.Is(err, goproxy.ErrUnverifiable) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	// The database's answers signed by another key are not trusted.
	other := goproxytest.New(t)
	forged := strings.Fields(other.SumDB)[0] + " " + strings.Fields(f.SumDB)[1]
	if _, _, err := goproxy.Download(ctx, goproxy.Options{Module: mod, Proxy: f.Proxy(), SumDB: forged}, "v1.0.0", t.TempDir()); err == nil {
		t.Fatal("a checksum database answering under another key verified the zip")
	}
}
