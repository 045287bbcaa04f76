package ulid

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEncodeBounds(t *testing.T) {
	var zero, max [16]byte
	for i := range max {
		max[i] = 0xFF
	}
	if got := encode(zero); got != "00000000000000000000000000" {
		t.Errorf("zero: %s", got)
	}
	// The largest ULID of the specification.
	if got := encode(max); got != "7ZZZZZZZZZZZZZZZZZZZZZZZZZ" {
		t.Errorf("max: %s", got)
	}
	var one [16]byte
	one[15] = 1
	if got := encode(one); got != "00000000000000000000000001" {
		t.Errorf("one: %s", got)
	}
}

// The first ten digits are the time in milliseconds, so IDs of different
// milliseconds sort by time whatever their random part.
func TestTimePrefix(t *testing.T) {
	at := time.UnixMilli(1469922850259) // the time of the specification's example, 01ARZ3NDEKTSV4RRFFQ69G5FAV
	id := makeAt(at)
	if !strings.HasPrefix(id, "01ARZ3NDEK") {
		t.Fatalf("%s does not start with the time 01ARZ3NDEK", id)
	}
	later := makeAt(at.Add(time.Millisecond))
	if later <= id {
		t.Fatalf("%s made a millisecond later does not sort after %s", later, id)
	}
	for _, c := range id {
		if !strings.ContainsRune(alphabet, c) {
			t.Fatalf("%s holds %q, outside Crockford's base32", id, c)
		}
	}
}

// IDs made in the same millisecond, from many goroutines, are distinct and
// sort in the order they were made.
func TestMonotonicWithinMillisecond(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	const goroutines, each = 8, 500
	var mu sync.Mutex
	var all []string
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev string
			for i := 0; i < each; i++ {
				id := makeAt(at)
				if id <= prev {
					t.Errorf("%s after %s in one goroutine", id, prev)
				}
				prev = id
				mu.Lock()
				all = append(all, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range all {
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
		if len(id) != Len {
			t.Fatalf("%s has %d characters", id, len(id))
		}
	}
}

// When the random part cannot grow within the millisecond, a fresh one is
// drawn rather than wrapping around to a smaller ID or failing.
func TestIncrementOverflow(t *testing.T) {
	r := [10]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	if increment(&r) {
		t.Fatal("an 80-bit maximum grew")
	}
	r = [10]byte{0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	if !increment(&r) || r[1] != 1 {
		t.Fatalf("no carry into the top bytes: %x", r)
	}
}

func BenchmarkMake(b *testing.B) {
	for b.Loop() {
		Make()
	}
}
