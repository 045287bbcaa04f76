package entrylog

import "testing"

func TestFold(t *testing.T) {
	es := Fold([]Event{
		{Seq: 1, EventID: "a1", EntryID: "a", Kind: "put"},
		{Seq: 2, EventID: "b1", EntryID: "b", Kind: "put"},
		{Seq: 3, EventID: "a2", EntryID: "a", Base: "a1", Kind: "put"},
		// Two devices edit a2 concurrently: both kept.
		{Seq: 5, EventID: "a3y", EntryID: "a", Base: "a2", Kind: "put"},
		{Seq: 4, EventID: "a3x", EntryID: "a", Base: "a2", Kind: "put"},
		{Seq: 6, EventID: "b2", EntryID: "b", Base: "b1", Kind: "delete"},
	})
	if len(es) != 2 || es[0].EntryID != "a" || es[1].EntryID != "b" {
		t.Fatalf("entries %+v", es)
	}
	a := es[0]
	if !a.Conflict() || len(a.Heads) != 2 || a.Heads[0].EventID != "a3x" || a.Latest().EventID != "a3y" || a.Deleted() {
		t.Fatalf("a = %+v", a)
	}
	if !es[1].Deleted() || len(es[1].Live()) != 0 {
		t.Fatalf("b = %+v", es[1])
	}
	// Resolving: one event replacing one head leaves the other; replacing
	// both (in two events) ends the conflict.
	es = Fold([]Event{
		{Seq: 1, EventID: "x1", EntryID: "x", Kind: "put"},
		{Seq: 2, EventID: "x2", EntryID: "x", Base: "x1", Kind: "put"},
		{Seq: 3, EventID: "x3", EntryID: "x", Base: "x1", Kind: "put"},
		{Seq: 4, EventID: "x4", EntryID: "x", Base: "x2", Kind: "put"},
	})
	if !es[0].Conflict() {
		t.Fatal("x3 was lost")
	}
}
