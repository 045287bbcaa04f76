// Package goproxy reads a module from the Go module proxy protocol (GOPROXY)
// and verifies it against the Go checksum database (GOSUMDB), as the go
// command does: the newest version from @latest, the zip of a version, and
// its h1: hash checked against the database's signed, append-only log.
// `reeve update` is its user: reeve is published as a Go module.
package goproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/dirhash"
)

// DefaultProxy and DefaultSumDB are the go command's defaults.
const (
	DefaultProxy = "https://proxy.golang.org,direct"
	DefaultSumDB = "sum.golang.org"
	// sumGolangOrgKey is the public verifier key of sum.golang.org, as the
	// go command knows it.
	sumGolangOrgKey = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ydy9ZUOhzQEEFNN"
)

// Errors a caller reports distinctly.
var (
	// ErrNotFound: no proxy in the list knows the module or version.
	ErrNotFound = errors.New("not found on the module proxy")
	// ErrChecksum: the downloaded zip does not hash to what the checksum
	// database says.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrUnverifiable: checking is switched off (GOSUMDB=off, GONOSUMDB,
	// GOPRIVATE) or no proxy can be used.
	ErrUnverifiable = errors.New("cannot verify the download")
)

// Options name the module and the go environment to use.
type Options struct {
	Module  string // module path, e.g. reeve.dev/reeve
	Proxy   string // GOPROXY; default DefaultProxy
	SumDB   string // GOSUMDB; default DefaultSumDB
	NoSumDB string // GONOSUMDB, else GOPRIVATE
	HTTP    *http.Client
}

// FromEnv fills the go environment of o from getenv.
func FromEnv(o Options, getenv func(string) string) Options {
	o.Proxy, o.SumDB = getenv("GOPROXY"), getenv("GOSUMDB")
	o.NoSumDB = getenv("GONOSUMDB")
	if o.NoSumDB == "" {
		o.NoSumDB = getenv("GOPRIVATE")
	}
	return o
}

func (o Options) client() *http.Client {
	if o.HTTP != nil {
		return o.HTTP
	}
	return http.DefaultClient
}

// proxies lists the proxy URLs to try in order; direct and off are not
// proxies reeve can read binaries' sources from.
func (o Options) proxies() ([]string, error) {
	list := o.Proxy
	if list == "" {
		list = DefaultProxy
	}
	var out []string
	for _, p := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '|' }) {
		switch p = strings.TrimSpace(p); p {
		case "", "direct":
		case "off":
			if len(out) == 0 {
				return nil, fmt.Errorf("%w: GOPROXY=off forbids downloads", ErrUnverifiable)
			}
		default:
			out = append(out, strings.TrimRight(p, "/"))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: GOPROXY %q names no proxy (direct version-control fetches are not used)", ErrUnverifiable, list)
	}
	return out, nil
}

// Info is a version as the proxy describes it.
type Info struct {
	Version string `json:"Version"`
	Time    string `json:"Time,omitempty"`
}

// Latest asks the proxies for the module's newest version (@latest).
func Latest(ctx context.Context, o Options) (Info, error) {
	esc, err := module.EscapePath(o.Module)
	if err != nil {
		return Info{}, err
	}
	b, err := o.fetch(ctx, esc+"/@latest")
	if err != nil {
		return Info{}, err
	}
	var in Info
	if err := json.Unmarshal(b, &in); err != nil || in.Version == "" {
		return Info{}, fmt.Errorf("read %s/@latest: not a version description", o.Module)
	}
	return in, nil
}

// Download fetches the zip of version into dir, checks its hash against
// the checksum database, and returns the zip's path and its h1: hash. A
// zip that does not match is removed and ErrChecksum returned.
func Download(ctx context.Context, o Options, version, dir string) (zipPath, sum string, err error) {
	esc, err := module.EscapePath(o.Module)
	if err != nil {
		return "", "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", "", err
	}
	want, err := o.lookup(version)
	if err != nil {
		return "", "", err
	}
	b, err := o.fetch(ctx, esc+"/@v/"+ev+".zip")
	if err != nil {
		return "", "", err
	}
	zipPath = filepath.Join(dir, "module.zip")
	if err := os.WriteFile(zipPath, b, 0o600); err != nil {
		return "", "", err
	}
	got, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		os.Remove(zipPath)
		return "", "", fmt.Errorf("hash %s@%s: %w", o.Module, version, err)
	}
	if got != want {
		os.Remove(zipPath)
		return "", "", fmt.Errorf("%w: %s@%s downloaded as %s, the checksum database says %s", ErrChecksum, o.Module, version, got, want)
	}
	return zipPath, got, nil
}

// lookup asks the checksum database for the module zip's h1: hash.
func (o Options) lookup(version string) (string, error) {
	db := o.SumDB
	if db == "" {
		db = DefaultSumDB
	}
	if db == "off" {
		return "", fmt.Errorf("%w: GOSUMDB=off", ErrUnverifiable)
	}
	ops, err := newSumOps(o, db)
	if err != nil {
		return "", err
	}
	c := sumdb.NewClient(ops)
	c.SetGONOSUMDB(o.NoSumDB)
	lines, err := c.Lookup(o.Module, version)
	if errors.Is(err, sumdb.ErrGONOSUMDB) {
		return "", fmt.Errorf("%w: %s is excluded from the checksum database by GONOSUMDB or GOPRIVATE", ErrUnverifiable, o.Module)
	}
	if err != nil {
		if ops.security != "" {
			return "", fmt.Errorf("%w: checksum database: %s", ErrChecksum, ops.security)
		}
		return "", fmt.Errorf("checksum database: %w", err)
	}
	prefix := o.Module + " " + version + " "
	for _, l := range lines {
		if h, ok := strings.CutPrefix(l, prefix); ok {
			return h, nil
		}
	}
	return "", fmt.Errorf("%w: the checksum database has no hash of %s@%s", ErrChecksum, o.Module, version)
}

// fetch reads path from the first proxy that has it; file:// proxies are
// directories in the protocol's layout.
func (o Options) fetch(ctx context.Context, path string) ([]byte, error) {
	proxies, err := o.proxies()
	if err != nil {
		return nil, err
	}
	var last error
	for _, p := range proxies {
		b, err := o.get(ctx, p+"/"+path)
		if err == nil {
			return b, nil
		}
		last = err
	}
	return nil, last
}

func (o Options) get(ctx context.Context, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		b, err := os.ReadFile(filepath.FromSlash(u.Path))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, raw)
		}
		return b, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A module zip is at most 500 MB by the protocol's rules.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 500<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, raw)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", raw, resp.Status)
	}
	return b, nil
}

// sumOps gives the checksum database client its remote reads (HTTP) and an
// in-memory cache and config; a fresh client per update checks the log's
// signature and inclusion proofs from scratch.
type sumOps struct {
	o        Options
	key      string
	url      string
	mu       sync.Mutex
	config   map[string][]byte
	cache    map[string][]byte
	security string
}

// newSumOps parses GOSUMDB: "name", "name+key" or "name+key url".
func newSumOps(o Options, db string) (*sumOps, error) {
	fields := strings.Fields(db)
	key := fields[0]
	if key == DefaultSumDB {
		key = sumGolangOrgKey
	}
	if !strings.Contains(key, "+") {
		return nil, fmt.Errorf("%w: GOSUMDB %q names no verifier key", ErrUnverifiable, db)
	}
	name, _, _ := strings.Cut(key, "+")
	u := "https://" + name
	if len(fields) > 1 {
		u = strings.TrimRight(fields[1], "/")
	}
	return &sumOps{o: o, key: key, url: u, config: map[string][]byte{}, cache: map[string][]byte{}}, nil
}

func (s *sumOps) ReadRemote(path string) ([]byte, error) {
	return s.o.get(context.Background(), s.url+path)
}

func (s *sumOps) ReadConfig(file string) ([]byte, error) {
	if file == "key" {
		return []byte(s.key), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.config[file], nil
}

func (s *sumOps) WriteConfig(file string, old, new []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(s.config[file]) != string(old) {
		return sumdb.ErrWriteConflict
	}
	s.config[file] = new
	return nil
}

func (s *sumOps) ReadCache(file string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cache[file]; ok {
		return b, nil
	}
	return nil, os.ErrNotExist
}

func (s *sumOps) WriteCache(file string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache[file] = data
}

func (s *sumOps) Log(string) {}

func (s *sumOps) SecurityError(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.security = msg
}
