package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers and readers lose no write (run with -race to see
// that they do not race either).
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("x"))
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(got))
	}
	b.Reset()
	if b.String() != "" {
		t.Fatal("Reset left bytes")
	}
}
