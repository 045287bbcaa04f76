// Package relevance decides which context entries matter for a task in a
// directory. It scores an entry's descriptors (use_when, update_when, a
// git document's path) and, where the content is at hand (on a device),
// its title, tags and body. The server scores descriptors only; a device
// scores everything, with the same rules.
//
// use_when is a list of conditions separated by ";" or newlines:
//
//	always              the entry is always relevant
//	path:GLOB           relevant when a file of the directory matches GLOB
//	                    ("**" spans folders: path:server/**/*.go)
//	anything else       words, matched against the task
package relevance

import (
	"path"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// Weights of the signals; Always puts an entry above any scored one.
const (
	Always      = 1000.0
	pathMatch   = 8.0
	useWhenWord = 4.0
	titleWord   = 3.0
	tagWord     = 3.0
	bodyWord    = 1.0
	pathWord    = 2.0
)

// Query is what an entry is scored against.
type Query struct {
	// Task is the prompt or task description.
	Task string
	// Paths are files of the directory, relative and slash-separated.
	Paths []string
}

// Prepared is a query tokenized once for many documents.
type Prepared struct {
	words map[string]bool
	paths []string
}

// Prepare tokenizes a query.
func Prepare(q Query) Prepared {
	p := Prepared{words: map[string]bool{}, paths: q.Paths}
	for _, w := range Words(q.Task) {
		p.words[w] = true
	}
	return p
}

// Doc is an entry as far as it is known: descriptors always, content when
// it was decrypted.
type Doc struct {
	UseWhen, UpdateWhen, Path string
	Title, Body               string
	Tags                      []string
}

// Score rates a document for a query: 0 means not relevant.
func (p Prepared) Score(d Doc) float64 {
	score := 0.0
	for _, c := range Conditions(d.UseWhen) {
		switch {
		case strings.EqualFold(c, "always"):
			score += Always
		case strings.HasPrefix(strings.ToLower(c), "path:"):
			glob := strings.TrimSpace(c[len("path:"):])
			if p.anyPath(glob) {
				score += pathMatch
			}
		default:
			score += useWhenWord * p.overlap(Words(c))
		}
	}
	// update_when says when the entry needs revising; a task about that
	// is a task the entry speaks to, at a lower weight.
	score += 0.5 * useWhenWord * p.overlap(Words(d.UpdateWhen))
	score += titleWord * p.overlap(Words(d.Title))
	for _, t := range d.Tags {
		score += tagWord * p.overlap(Words(t))
	}
	score += bodyWord * p.bodyOverlap(d.Body)
	score += pathWord * p.overlap(Words(strings.NewReplacer("/", " ", ".", " ", "-", " ", "_", " ").Replace(d.Path)))
	return score
}

// overlap is the share of ws found in the task, weighted toward lists
// whose every word matches.
func (p Prepared) overlap(ws []string) float64 {
	if len(ws) == 0 || len(p.words) == 0 {
		return 0
	}
	hit := 0
	for _, w := range ws {
		if p.words[w] {
			hit++
		}
	}
	return float64(hit) / float64(len(ws)) * float64(min(hit, 3))
}

// bodyOverlap counts distinct task words in a body, saturating so a long
// body does not outweigh a precise title.
func (p Prepared) bodyOverlap(body string) float64 {
	if body == "" || len(p.words) == 0 {
		return 0
	}
	seen := map[string]bool{}
	for _, w := range Words(body) {
		if p.words[w] {
			seen[w] = true
		}
	}
	n := float64(len(seen))
	return n / (n + 2) * 3
}

func (p Prepared) anyPath(glob string) bool {
	for _, f := range p.paths {
		if Match(glob, f) {
			return true
		}
	}
	return false
}

// Conditions splits a use_when into its conditions.
func Conditions(s string) []string {
	var out []string
	for _, c := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Match reports whether a slash path matches a glob where "**" spans any
// number of folders and the other patterns are path.Match's.
func Match(glob, name string) bool {
	return matchSegs(strings.Split(strings.Trim(glob, "/"), "/"), strings.Split(name, "/"))
}

func matchSegs(g, n []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			for i := 0; i <= len(n); i++ {
				if matchSegs(g[1:], n[i:]) {
					return true
				}
			}
			return false
		}
		if len(n) == 0 {
			return false
		}
		if ok, err := path.Match(g[0], n[0]); err != nil || !ok {
			return false
		}
		g, n = g[1:], n[1:]
	}
	return len(n) == 0
}

// stopWords is built on first use rather than in init, which every start of
// the binary pays for.
var stopWords = sync.OnceValue(func() map[string]bool {
	stop := map[string]bool{}
	for _, w := range strings.Fields("a an and are as at be by for from has have in is it its of on or that the this to was were will with when what which who how not no do does use using into over under we you our your i me my all any can should must") {
		stop[w] = true
	}
	return stop
})

// Words lowercases s and splits it into words, without stop words and
// with a plural "s" dropped, so "Migrations" matches "migration".
func Words(s string) []string {
	var out []string
	stop := stopWords()
	for _, f := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len(f) < 2 || stop[f] {
			continue
		}
		if len(f) > 3 && strings.HasSuffix(f, "s") && !strings.HasSuffix(f, "ss") {
			f = f[:len(f)-1]
		}
		out = append(out, f)
	}
	return out
}

// Ranked is a scored item.
type Ranked[T any] struct {
	Item  T
	Score float64
}

// Top keeps the items with a positive score, best first (stable), at most
// limit of them (0: all).
func Top[T any](items []T, score func(T) float64, limit int) []Ranked[T] {
	var out []Ranked[T]
	for _, it := range items {
		if s := score(it); s > 0 {
			out = append(out, Ranked[T]{Item: it, Score: s})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
