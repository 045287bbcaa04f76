package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake-ups between replicas. On PostgreSQL a notice goes through NOTIFY and
// reaches every replica LISTENing on the channel, after the transaction
// that sent it commits; on SQLite (one process) it reaches this store's
// own listeners, the same way. A notice only says "look again": whoever
// receives one reads the database, so a lost notice costs a delay (the
// listener's periodic look), never data.

// Notice channels.
const (
	// NoticeRelayBus carries the id of a relay instance with new bus
	// messages.
	NoticeRelayBus = "reeve_relay_bus"
	// NoticeGeneration carries the name of a cache generation bumped.
	NoticeGeneration = "reeve_generation"
)

// Listener receives notices; see Listen.
type Listener struct {
	// Notice is called for each notice, on the listening goroutine.
	Notice func(channel, payload string)
	// Up is called with true once the listener receives every notice
	// sent from then on, and with false when it lost its connection (and
	// may miss some) until the next true.
	Up func(up bool)
}

// Listen delivers the notices of channels to l until ctx ends, when it
// returns ctx's error. On PostgreSQL it holds a connection of its own and
// reconnects, with backoff, when it is lost.
func (s *DB) Listen(ctx context.Context, l Listener, channels ...string) error {
	if l.Notice == nil {
		l.Notice = func(string, string) {}
	}
	if l.Up == nil {
		l.Up = func(bool) {}
	}
	if s.engine != EnginePostgres {
		sub := s.local.add(l.Notice, channels)
		defer s.local.remove(sub)
		l.Up(true)
		<-ctx.Done()
		return ctx.Err()
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, l, channels)
		if ctx.Err() != nil {
			break
		}
		l.Up(false)
		if err != nil {
			backoff = min(2*backoff, 5*time.Second)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return ctx.Err()
}

func (s *DB) listenOnce(ctx context.Context, l Listener, channels []string) error {
	conn, err := pgx.ConnectConfig(ctx, s.pgcfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	l.Up(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.Notice(n.Channel, n.Payload)
	}
}

// Notify sends a notice on channel.
func (s *DB) Notify(ctx context.Context, channel, payload string) error {
	if s.engine != EnginePostgres {
		s.local.send(channel, payload)
		return nil
	}
	_, err := s.write.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return unavailable(err)
}

// notifyTx sends a notice when tx commits (PostgreSQL) or returns it to
// send after the commit (SQLite: the caller passes it to sendLocal).
func (s *DB) notifyTx(tx *Tx, channel, payload string) (local []notice, err error) {
	if s.engine != EnginePostgres {
		return []notice{{channel, payload}}, nil
	}
	_, err = tx.Exec(`SELECT pg_notify(?, ?)`, channel, payload)
	return nil, err
}

type notice struct{ channel, payload string }

func (s *DB) sendLocal(ns []notice) {
	for _, n := range ns {
		s.local.send(n.channel, n.payload)
	}
}

// localNotices fans notices out in process (SQLite).
type localNotices struct {
	mu   sync.Mutex
	subs map[*localSub]struct{}
}

type localSub struct {
	fn       func(channel, payload string)
	channels map[string]bool
}

func (ln *localNotices) add(fn func(string, string), channels []string) *localSub {
	sub := &localSub{fn: fn, channels: map[string]bool{}}
	for _, c := range channels {
		sub.channels[c] = true
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.subs == nil {
		ln.subs = map[*localSub]struct{}{}
	}
	ln.subs[sub] = struct{}{}
	return sub
}

func (ln *localNotices) remove(sub *localSub) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	delete(ln.subs, sub)
}

func (ln *localNotices) send(channel, payload string) {
	ln.mu.Lock()
	var fns []func(string, string)
	for sub := range ln.subs {
		if sub.channels[channel] {
			fns = append(fns, sub.fn)
		}
	}
	ln.mu.Unlock()
	for _, fn := range fns {
		fn(channel, payload)
	}
}

// ---- cache generations ----

// BumpGeneration increments the counter name and notifies every replica
// (NoticeGeneration): what they cached before it may be stale.
func (s *DB) BumpGeneration(ctx context.Context, name string) (int64, error) {
	var (
		gen   int64
		local []notice
	)
	err := s.execSimple(ctx, func(tx *Tx) error {
		if err := tx.QueryRow(`INSERT INTO cache_generations (name, gen) VALUES (?, 1)
			ON CONFLICT (name) DO UPDATE SET gen = cache_generations.gen + 1 RETURNING gen`, name).Scan(&gen); err != nil {
			return err
		}
		var err error
		local, err = s.notifyTx(tx, NoticeGeneration, name)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bump generation %s: %w", name, err)
	}
	s.sendLocal(local)
	return gen, nil
}

// Generation reads the counter name (0 before its first bump).
func (s *DB) Generation(ctx context.Context, name string) (int64, error) {
	var gen int64
	err := s.queryRow(ctx, `SELECT gen FROM cache_generations WHERE name = ?`, name).Scan(&gen)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("generation %s: %w", name, unavailable(err))
	}
	return gen, nil
}

// ---- the relay bus ----

// BusMessage is one message on the relay bus: Body is the publisher's
// encoding, opaque to the store; Seq orders an instance's messages and
// acknowledges them.
type BusMessage struct {
	Seq  int64
	To   string
	Body []byte
}

// BusRefusal says why PublishBus refused a message.
var (
	ErrUnknownInstance = errors.New("unknown relay instance")
	ErrInboxFull       = errors.New("the relay instance's inbox is full")
)

// busInsertRows is the most messages one INSERT statement carries.
const busInsertRows = 128

// PublishBus queues msgs for their instances in one transaction and
// notifies each instance (NoticeRelayBus). A message for an instance not
// seen since aliveSince, or whose inbox holds inboxCap messages, is
// refused: refused[i] is the reason for msgs[i], nil when it was queued.
func (s *DB) PublishBus(ctx context.Context, msgs []BusMessage, inboxCap int, aliveSince, now time.Time) ([]error, error) {
	refused := make([]error, len(msgs))
	var local []notice
	err := s.execSimple(ctx, func(tx *Tx) error {
		clear(refused)
		local = local[:0]
		room := map[string]int{} // messages each instance may still take; -1: unknown
		var rows []any           // instance_id, body, created_at of each accepted message
		for i, m := range msgs {
			n, ok := room[m.To]
			if !ok {
				// On PostgreSQL the instance's row is locked until the
				// commit, so that publishes to one instance commit in the
				// order of their sequence numbers: a pull never sees a
				// later message before an earlier one commits (it would
				// acknowledge past it).
				var seen int64
				err := tx.QueryRow(s.lockClause(`SELECT seen_at FROM relay_instances WHERE instance_id = ?`), m.To).Scan(&seen)
				switch {
				case isNoRows(err) || (err == nil && seen < aliveSince.UnixNano()):
					n = -1
				case err != nil:
					return err
				default:
					var held int
					if err := tx.QueryRow(`SELECT count(*) FROM (SELECT 1 FROM relay_bus WHERE instance_id = ? LIMIT ?) q`, m.To, inboxCap).Scan(&held); err != nil {
						return err
					}
					n = inboxCap - held
					// One notice per instance and batch.
					ns, err := s.notifyTx(tx, NoticeRelayBus, m.To)
					if err != nil {
						return err
					}
					local = append(local, ns...)
				}
			}
			switch {
			case n < 0:
				refused[i] = ErrUnknownInstance
			case n == 0:
				refused[i] = ErrInboxFull
			default:
				rows = append(rows, m.To, m.Body, now.UnixNano())
				n--
			}
			room[m.To] = n
		}
		// Multi-row inserts, in order: a batch costs a few statements, not
		// one per message.
		for len(rows) > 0 {
			k := min(len(rows), 3*busInsertRows)
			q := `INSERT INTO relay_bus (instance_id, body, created_at) VALUES (?,?,?)` + strings.Repeat(`,(?,?,?)`, k/3-1)
			if _, err := tx.Exec(q, rows[:k]...); err != nil {
				return err
			}
			rows = rows[k:]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("publish to the relay bus: %w", err)
	}
	s.sendLocal(local)
	return refused, nil
}

// PullBus deletes instance's messages up to ack (those it has received)
// and returns up to max of the rest, in publish order. One instance pulls
// at a time (its relay's pull loop), so a pull whose answer was lost is
// answered again by the next.
func (s *DB) PullBus(ctx context.Context, instance string, ack int64, max int) ([]BusMessage, error) {
	if ack > 0 {
		err := s.execSimple(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`DELETE FROM relay_bus WHERE instance_id = ? AND seq <= ?`, instance, ack)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("acknowledge relay bus messages: %w", err)
		}
	}
	rows, err := s.query(ctx, `SELECT seq, body FROM relay_bus WHERE instance_id = ? AND seq > ? ORDER BY seq LIMIT ?`, instance, ack, max)
	if err != nil {
		return nil, fmt.Errorf("pull the relay bus: %w", err)
	}
	defer rows.Close()
	var out []BusMessage
	for rows.Next() {
		m := BusMessage{To: instance}
		if err := rows.Scan(&m.Seq, &m.Body); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pull the relay bus: %w", unavailable(err))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// TouchRelayInstance marks instance alive at now.
func (s *DB) TouchRelayInstance(ctx context.Context, instance string, now time.Time) error {
	err := s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO relay_instances (instance_id, seen_at) VALUES (?,?)
			ON CONFLICT (instance_id) DO UPDATE SET seen_at = excluded.seen_at WHERE relay_instances.seen_at < excluded.seen_at`, instance, now.UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("relay instance %s: %w", instance, err)
	}
	return nil
}

// PruneRelay forgets the instances not seen since before, with their
// presence and undelivered messages (nobody will pull them), and presence
// expired before then.
func (s *DB) PruneRelay(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.execSimple(ctx, func(tx *Tx) error {
		n = 0
		b := before.UnixNano()
		for _, q := range []string{
			`DELETE FROM relay_bus WHERE instance_id IN (SELECT instance_id FROM relay_instances WHERE seen_at < ?)`,
			`DELETE FROM relay_presence WHERE instance_id IN (SELECT instance_id FROM relay_instances WHERE seen_at < ?)`,
			`DELETE FROM relay_instances WHERE seen_at < ?`,
		} {
			res, err := tx.Exec(q, b)
			if err != nil {
				return err
			}
			k, _ := res.RowsAffected()
			n += k
		}
		// Messages for instances never seen (their publisher raced the
		// instance's end) go too, and presence long expired (its removal
		// was lost).
		if _, err := tx.Exec(`DELETE FROM relay_bus WHERE created_at < ? AND instance_id NOT IN (SELECT instance_id FROM relay_instances)`, b); err != nil {
			return err
		}
		_, err := tx.Exec(`DELETE FROM relay_presence WHERE expires_at < ?`, b)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune relay state: %w", err)
	}
	return n, nil
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// lockClause adds FOR UPDATE on PostgreSQL; SQLite's one writer needs none.
func (s *DB) lockClause(q string) string {
	if s.engine == EnginePostgres {
		return q + " FOR UPDATE"
	}
	return q
}
