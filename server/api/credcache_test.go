package api

import (
	"testing"
	"time"

	"reeve.dev/reeve/server/auth"
)

// A lookup that read the store before a revocation must not cache what it
// read after the revocation dropped the cache: the revoked credential would
// keep working until the entry expired.
func TestCredCacheRefusesAnswerThatRacedADrop(t *testing.T) {
	cc := newCredCache(time.Hour)
	now := time.Now()
	p := auth.Principal{Kind: auth.KindDaemon, InstallID: "i1", Workspace: "w1"}

	gen := cc.generation() // the lookup starts and reads the store...
	cc.drop(func(_ string, q auth.Principal) bool { return q.InstallID == "i1" })
	cc.put("install:i1", p, nil, now, gen) // ...and answers after the revocation
	if _, ok := cc.get("install:i1", now); ok {
		t.Fatal("an answer read before the revocation was cached after it")
	}

	gen = cc.generation()
	cc.put("install:i1", p, nil, now, gen)
	if _, ok := cc.get("install:i1", now); !ok {
		t.Fatal("an answer with no revocation in between was not cached")
	}
}
