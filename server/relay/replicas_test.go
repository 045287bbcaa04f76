package relay_test

import (
	"path/filepath"
	"testing"

	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// Two server replicas on one PostgreSQL database, each with its embedded
// relay: a daemon on one replica's relay and clients on the other's meet
// through the presence and bus in the database, in both directions, and a
// daemon moving between them replaces its old connection.
func TestRelayAcrossReplicas(t *testing.T) {
	pg := storetest.PostgresURL(t)
	dir := filepath.Join(t.TempDir(), "data")
	o := servertest.Options{DataDir: dir, DatabaseURL: pg, PublicURL: "http://replicas.test"}
	s1 := servertest.Start(t, o)
	s2 := servertest.Start(t, o)
	f := fixtureOn(t, s1)
	testTwoInstances(t, f, s1.URL, s2.URL, s2.Host.Relay())
}
