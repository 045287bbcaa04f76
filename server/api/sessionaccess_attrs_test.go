package api

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"reeve.dev/reeve/server/store"
)

// The session list reads a session's access from the attributes it
// decoded for the answer (accessOfAttrs); every other path decodes the
// raw attributes (accessOf). The two must agree on every session, or a
// member's list would show what the session's own routes refuse.
func TestAccessOfAttrsAgrees(t *testing.T) {
	for _, raw := range []string{
		`{}`,
		`{"title":"t","visibility_scope":"private","owner_user_id":7}`,
		`{"visibility_scope":"team","primary_owning_team_id":"T1","owning_group_id":"G1","owner_user_id":9007199254740991}`,
		`{"visibility_scope":"private","acl":{"user:8":{"id":"e1","subject_type":"user","subject_id":8,"role":"steerer","granted_by":"user:7","granted_at":"2026-01-02T03:04:05Z"},"share_group:3":{"id":"e2","subject_type":"share_group","subject_id":3,"group_id":"G3","role":"approver","granted_at":1767323045}}}`,
		`{"acl":{"user:8":{"role":"viewer"},"user:9":{}}}`,
		`{"acl":{}}`,
		`{"acl":null,"owner_user_id":null,"visibility_scope":""}`,
		`{"visibility_scope":"workspace","status":"active","source_kind":"cli","steps":[1,2,{"x":null}]}`,
		`{"project_access":null}`,
		`{"project_access":{"members":[{"team":"platform","role":"operator"}]}}`,
		`{"project_access":{"default_role":"none","members":[],"invalid":"bad"},"visibility_scope":"private"}`,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		want, got := accessOf(json.RawMessage(raw)), accessOfAttrs(m)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s:\naccessOf      %+v\naccessOfAttrs %+v", raw, want, got)
		}
	}
	// A field added to either struct must be read by accessOfAttrs too:
	// fill every field through JSON and compare.
	full := map[string]any{}
	fill := func(typ reflect.Type, into map[string]any) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch f.Type.Kind() {
			case reflect.String:
				into[name] = "v-" + name
			case reflect.Int64:
				into[name] = 40 + i
			case reflect.Interface:
				into[name] = "any-" + name
			case reflect.Map:
			case reflect.Pointer:
				// project_access: a synced project's access.yaml.
				into[name] = map[string]any{"default_role": "none", "invalid": "v-invalid", "members": []any{map[string]any{"user": "u@example.com", "role": "viewer"}, map[string]any{"team": "t", "role": "admin"}}}
			default:
				t.Fatalf("%s.%s: a field of kind %s; teach accessOfAttrs and this test", typ.Name(), f.Name, f.Type.Kind())
			}
		}
	}
	fill(reflect.TypeOf(sessionAccess{}), full)
	entry := map[string]any{}
	fill(reflect.TypeOf(aclEntry{}), entry)
	full["acl"] = map[string]any{"user:1": entry}
	raw, _ := json.Marshal(full)
	var m map[string]any
	json.Unmarshal(raw, &m)
	if want, got := accessOf(raw), accessOfAttrs(m); !reflect.DeepEqual(want, got) {
		t.Errorf("every field set:\naccessOf      %+v\naccessOfAttrs %+v", want, got)
	}
}

// BenchmarkListedSessionDecode is the per-session cost of a member's
// session list: the access and the answer's attributes of a session with
// 50 ACL entries. The baseline decodes the raw attributes twice (accessOf,
// then toSDK), as the list did; decode-once is what it does now.
func BenchmarkListedSessionDecode(b *testing.B) {
	acl := map[string]any{}
	for j := 0; j < 50; j++ {
		acl["user:"+strconv.Itoa(1000+j)] = map[string]any{"id": "e" + strconv.Itoa(j), "subject_type": "user", "subject_id": 1000 + j, "role": "viewer", "granted_by": "user:1", "granted_at": "2026-01-02T03:04:05Z"}
	}
	raw, _ := json.Marshal(map[string]any{"title": "s", "source_kind": "cli", "status": "active", "visibility_scope": "private", "owner_user_id": 1, "acl": acl})
	rec := store.Record{ID: "S1", Collection: "sessions", Attributes: raw}
	b.Run("decode-twice-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			a := accessOf(rec.Attributes)
			sr, err := toSDK(rec)
			if err != nil || len(a.ACL) != 50 || len(sr.Attributes) != 6 {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-once", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sr, err := toSDK(rec)
			a := accessOfAttrs(sr.Attributes)
			if err != nil || len(a.ACL) != 50 || len(sr.Attributes) != 6 {
				b.Fatal(err)
			}
		}
	})
}
