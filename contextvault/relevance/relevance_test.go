package relevance

import "testing"

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		glob, name string
		want       bool
	}{
		{"**/*.go", "main.go", true},
		{"**/*.go", "server/api/routes.go", true},
		{"server/**", "server/api/routes.go", true},
		{"server/**/*.sql", "server/store/migrations/0001.sql", true},
		{"server/*.go", "server/api/routes.go", false},
		{"*.md", "docs/a.md", false},
		{"docs/*.md", "docs/a.md", true},
		{"[", "x", false},
	} {
		if got := Match(c.glob, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.glob, c.name, got)
		}
	}
}

func TestScore(t *testing.T) {
	q := Prepare(Query{Task: "Add a database migration for billing invoices", Paths: []string{"server/store/migrations/0001_init.sql", "go.mod"}})
	always := q.Score(Doc{UseWhen: "always"})
	path := q.Score(Doc{UseWhen: "path:**/migrations/*.sql"})
	words := q.Score(Doc{UseWhen: "writing migrations"})
	title := q.Score(Doc{Title: "Billing invoices are immutable"})
	none := q.Score(Doc{UseWhen: "path:**/*.py; frontend styling", Title: "CSS rules"})
	if !(always > path && path > 0 && words > 0 && title > 0) {
		t.Fatalf("always %v path %v words %v title %v", always, path, words, title)
	}
	if none != 0 {
		t.Fatalf("an unrelated entry scored %v", none)
	}
	top := Top([]Doc{{Title: "CSS"}, {Title: "billing"}, {UseWhen: "always"}}, q.Score, 0)
	if len(top) != 2 || top[0].Item.UseWhen != "always" || top[1].Item.Title != "billing" {
		t.Fatalf("Top = %+v", top)
	}
}

func TestWords(t *testing.T) {
	got := Words("The Migrations, of CLASS and x")
	want := []string{"migration", "class"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Words = %q", got)
	}
}
