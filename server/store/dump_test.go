package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// fill writes a little of everything: users, a workspace with members,
// tokens, a login link, an install, records (with a natural key), the
// audit, a secret and the context vault's tables.
func fill(t *testing.T, s *DB) {
	t.Helper()
	f := setupCV(t, s)
	ctx, now := context.Background(), time.Now()
	exp := now.Add(time.Hour)
	if err := s.CreateToken(ctx, Token{ID: newID(), Kind: TokenPersonal, UserID: f.alice, Name: "ci", Hash: "h1", Prefix: "rvp_1", CreatedAt: now, ExpiresAt: &exp}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLoginLink(ctx, LoginLink{Hash: "lh", UserID: f.bob, CreatedAt: now, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateInstall(ctx, Install{ID: newID(), WorkspaceID: f.ws, Name: "m", TokenHash: "ih", CreatedBy: "user:1", CreatedAt: now}, f.audit("install.create")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		key := ""
		if i%10 == 0 {
			key = fmt.Sprintf("k%d", i)
		}
		r := Record{WorkspaceID: f.ws, Collection: "workflow-runs", NaturalKey: key, Attributes: json.RawMessage(fmt.Sprintf(`{"i":%d,"s":"é\u0000x"}`, i)), CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
		if err := s.CreateRecord(ctx, &r, f.audit("record.create")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Secret(ctx, "relay-jwt-hs256", func() ([]byte, error) { return []byte{0, 1, 2, 0xff, 0xfe}, nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AppendContextEvents(ctx, f.ws, f.vault.ID, []ContextEvent{{EventID: "e1", EntryID: "n1", Kind: "put", Epoch: 0, Ciphertext: "c", Digest: "d", DeviceID: f.a1.ID, CreatedAt: now}}, func(ContextSource) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// tableData is every table's rows as sorted JSON lines: what "the data is
// equal" means across engines.
func tableData(t *testing.T, s *DB) map[string][]string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.Export(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var cur string
	var cols []string
	dec := json.NewDecoder(&buf)
	dec.Decode(&dumpHeader{})
	for dec.More() {
		var l dumpLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		switch {
		case l.Table != "":
			cur, cols = l.Table, l.Columns
			out[cur] = []string{}
		case l.Row != nil:
			m := map[string]any{}
			for i, c := range cols {
				m[c] = l.Row[i]
			}
			b, _ := json.Marshal(m)
			out[cur] = append(out[cur], string(b))
		}
	}
	for _, rows := range out {
		sort.Strings(rows)
	}
	return out
}

// SQLite → PostgreSQL → SQLite: the data is equal at every step, and the
// imported store keeps working (identities continue past imported ids).
func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	lite := sqliteEngine(t).open(t)
	fill(t, lite)
	want := tableData(t, lite)
	if len(want["records"]) != 50 || len(want["cv_events"]) != 1 || len(want["secrets"]) != 1 {
		t.Fatalf("fixture: %d records, %d events", len(want["records"]), len(want["cv_events"]))
	}
	var dump bytes.Buffer
	sum, err := lite.Export(ctx, &dump)
	if err != nil || sum.Rows == 0 || sum.Engine != EngineSQLite {
		t.Fatalf("export: %+v %v", sum, err)
	}
	pg := postgresEngine(t).open(t)
	isum, err := pg.Import(ctx, bytes.NewReader(dump.Bytes()))
	if err != nil || isum.Rows != sum.Rows {
		t.Fatalf("import: %+v %v (exported %d rows)", isum, err, sum.Rows)
	}
	if got := tableData(t, pg); !reflect.DeepEqual(got, want) {
		for tb := range want {
			if !reflect.DeepEqual(got[tb], want[tb]) {
				t.Errorf("table %s differs:\n sqlite:   %v\n postgres: %v", tb, want[tb], got[tb])
			}
		}
		t.FailNow()
	}
	// The imported store works: reads, new rows past the imported ids.
	u, created, err := pg.EnsureUser(ctx, "carol@example.com")
	if err != nil || !created || u.ID <= 2 {
		t.Fatalf("new user after import: %+v %v %v", u, created, err)
	}
	if v, err := pg.Secret(ctx, "relay-jwt-hs256", nil); err != nil || !bytes.Equal(v, []byte{0, 1, 2, 0xff, 0xfe}) {
		t.Fatalf("secret after import: %x %v", v, err)
	}
	r := Record{WorkspaceID: "w", Collection: "c", Attributes: json.RawMessage(`{}`), CreatedBy: "t", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := pg.CreateRecord(ctx, &r, AuditEntry{WorkspaceID: "w", Action: "x"}); err != nil || r.Seq <= 50 {
		t.Fatalf("new record after import: seq %d %v", r.Seq, err)
	}
	// A second import into the now non-empty database is refused.
	if _, err := pg.Import(ctx, bytes.NewReader(dump.Bytes())); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("import into a non-empty database: %v", err)
	}
	// And back to SQLite.
	var dump2 bytes.Buffer
	if _, err := pg.Export(ctx, &dump2); err != nil {
		t.Fatal(err)
	}
	back := sqliteEngine(t).open(t)
	if _, err := back.Import(ctx, &dump2); err != nil {
		t.Fatal(err)
	}
	if got, pgd := tableData(t, back), tableData(t, pg); !reflect.DeepEqual(got, pgd) {
		t.Fatalf("PostgreSQL → SQLite changed the data")
	}
}

// A damaged or truncated dump imports nothing.
func TestImportRefusesDamagedDumps(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		src := sqliteEngine(t).open(t)
		fill(t, src)
		var dump bytes.Buffer
		if _, err := src.Export(ctx, &dump); err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(dump.String(), "\n")
		dst := e.open(t)
		for name, body := range map[string]string{
			"truncated":   strings.Join(lines[:len(lines)/2], ""),
			"row dropped": strings.Join(append(append([]string{}, lines[:5]...), lines[6:]...), ""),
			"not a dump":  "hello\n",
			"wrong width": strings.Replace(dump.String(), `{"r":[`, `{"r":[1,`, 1),
		} {
			if _, err := dst.Import(ctx, strings.NewReader(body)); err == nil {
				t.Fatalf("%s: imported", name)
			}
			if n, _ := dst.CountUsers(ctx); n != 0 {
				t.Fatalf("%s: %d users left behind", name, n)
			}
		}
	})
}
