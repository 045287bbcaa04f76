// Package entrylog folds a source's event log into its entries. Each
// event puts or deletes one entry and names the event it replaces (its
// base); an event no other event replaces is a head. An entry with two
// heads was edited on two devices from the same base: both edits are
// kept, and the entry is in conflict until someone writes one event that
// replaces them (any later edit of it names one head; the others stay
// heads until replaced too, which a device does by writing one put on
// one head and a delete on each other head).
package entrylog

import "sort"

// Event is what the fold needs of an event.
type Event struct {
	Seq     int64
	EventID string
	EntryID string
	Base    string
	Kind    string // put, delete or doc
}

// Entry is an entry's current state: its heads, oldest first.
type Entry struct {
	EntryID string
	Heads   []Event
}

// Deleted reports whether every head deletes the entry.
func (e Entry) Deleted() bool {
	for _, h := range e.Heads {
		if h.Kind != "delete" {
			return false
		}
	}
	return true
}

// Conflict reports whether the entry has more than one live head. An
// edit racing a delete is no conflict: the edit wins, nothing is lost.
func (e Entry) Conflict() bool { return len(e.Live()) > 1 }

// Latest is the newest head.
func (e Entry) Latest() Event { return e.Heads[len(e.Heads)-1] }

// Live are the heads that put content (what a reader sees).
func (e Entry) Live() []Event {
	var out []Event
	for _, h := range e.Heads {
		if h.Kind != "delete" {
			out = append(out, h)
		}
	}
	return out
}

// Fold returns the entries of a log in the order they first appeared.
// Events may come in any order.
func Fold(events []Event) []Entry {
	replaced := make(map[string]bool, len(events))
	for _, e := range events {
		if e.Base != "" {
			replaced[e.Base] = true
		}
	}
	byEntry := map[string]*Entry{}
	first := map[string]int64{}
	for _, e := range events {
		if f, ok := first[e.EntryID]; !ok || e.Seq < f {
			first[e.EntryID] = e.Seq
		}
		if replaced[e.EventID] {
			continue
		}
		en := byEntry[e.EntryID]
		if en == nil {
			en = &Entry{EntryID: e.EntryID}
			byEntry[e.EntryID] = en
		}
		en.Heads = append(en.Heads, e)
	}
	out := make([]Entry, 0, len(byEntry))
	for _, en := range byEntry {
		sort.Slice(en.Heads, func(i, j int) bool { return en.Heads[i].Seq < en.Heads[j].Seq })
		out = append(out, *en)
	}
	sort.Slice(out, func(i, j int) bool { return first[out[i].EntryID] < first[out[j].EntryID] })
	return out
}
