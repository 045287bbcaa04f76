package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/wire"
)

// amplify measures the event log's write amplification through the real
// binary: a shell session prints -mb MiB of base64 text (lines of -line
// bytes) as fast as the terminal takes it, so the output arrives in reads
// of whatever the PTY holds (about 4 KB), as an agent's busy terminal
// does. Once the daemon has stopped (its last connection checkpoints the
// log into the database file and removes the WAL), the database file's
// size is set against the terminal text the log holds.
//
//	loadgen amplify -reeve ./reeve -mb 64
func amplify(args []string) error {
	fs := flag.NewFlagSet("amplify", flag.ExitOnError)
	reeve := fs.String("reeve", "reeve", "the reeve binary")
	mb := fs.Int("mb", 64, "MiB of random bytes, printed as base64")
	line := fs.Int("line", 4000, "base64 line length")
	fs.Parse(args)
	sd, err := startScratchDaemon(*reeve)
	if err != nil {
		return err
	}
	defer sd.close()
	dir := sd.dir
	ctx := context.Background()
	cl, dirID, err := sd.client(ctx)
	if err != nil {
		return err
	}
	conn, err := controlclient.DialHome(ctx, dir, controlclient.ConnOptions{RequestTimeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	t0 := time.Now()
	si, err := conn.Launch(ctx, wire.LaunchRequest{Directory: dirID, Agent: "shell",
		Prompt: fmt.Sprintf("head -c %d /dev/urandom | base64 -w %d", *mb<<20, *line)})
	if err != nil {
		return err
	}
	for {
		s, err := cl.Session(ctx, si.ID)
		if err != nil {
			return err
		}
		if s.Status != "starting" && s.Status != "running" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wall := time.Since(t0)
	// What the log holds: every event, and the terminal text among them.
	pr, pw := io.Pipe()
	go func() {
		_, err := cl.StreamEvents(ctx, si.ID, 0, 0, pw)
		pw.CloseWithError(err)
	}()
	var events, chunks, text, data int64
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var u wire.SessionUpdate
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			return err
		}
		events++
		data += int64(len(u.Data))
		if u.Kind == wire.KindTerminalOutput {
			var t wire.TerminalOutput
			if err := json.Unmarshal(u.Data, &t); err != nil {
				return fmt.Errorf("event %d: %w", u.Seq, err)
			}
			b, err := t.Bytes()
			if err != nil {
				return fmt.Errorf("event %d: %w", u.Seq, err)
			}
			chunks++
			text += int64(len(b))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	conn.Close()
	if err := sd.stop(); err != nil {
		return err
	}
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	db := size(dir.StoreFile()) + size(dir.StoreFile()+"-wal")
	var evidence int64
	filepath.Walk(filepath.Join(string(dir), "sessions"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".pty") {
			evidence += fi.Size()
		}
		return nil
	})
	fmt.Printf("terminal text %d B in %d chunks (%.0f B each), %d events, %d B of event data, in %v\n",
		text, chunks, float64(text)/float64(max(chunks, 1)), events, data, wall.Round(time.Millisecond))
	fmt.Printf("database %d B = %.2fx the terminal text, %.2fx the event data; evidence files %d B (%.2fx)\n",
		db, float64(db)/float64(max(text, 1)), float64(db)/float64(max(data, 1)), evidence, float64(evidence)/float64(max(text, 1)))
	return nil
}
