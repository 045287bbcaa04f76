-- State that several server replicas share so that relay instances behind
-- different replicas meet (store/presence.go, store/bus.go), and the
-- generation counters that tell replicas to drop cached credentials.
-- Its PostgreSQL twin is ../postgres/0011_relay_shared.sql.

-- A relay instance is alive while it pulls or reports presence; its
-- presence and undelivered messages mean nothing once it is not.
CREATE TABLE relay_instances (
    instance_id TEXT PRIMARY KEY,
    seen_at     INTEGER NOT NULL -- unix nanoseconds
);

-- Which relay instance holds the daemon connection of a runtime target.
CREATE TABLE relay_presence (
    workspace_id      TEXT NOT NULL,
    runtime_target_id TEXT NOT NULL,
    instance_id       TEXT NOT NULL,
    conn_id           TEXT NOT NULL,
    connected_at      INTEGER NOT NULL, -- unix nanoseconds
    expires_at        INTEGER NOT NULL, -- unix nanoseconds
    PRIMARY KEY (workspace_id, runtime_target_id)
);
CREATE INDEX relay_presence_by_instance ON relay_presence(instance_id);

-- Bus messages waiting for their instance, in publish order. A message is
-- deleted when its instance acknowledges it (a later pull), so a pull
-- whose answer is lost is answered again.
CREATE TABLE relay_bus (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    body        BLOB NOT NULL,
    created_at  INTEGER NOT NULL -- unix nanoseconds
);
CREATE INDEX relay_bus_by_instance ON relay_bus(instance_id, seq);

-- Counters bumped on every change that invalidates what replicas cache
-- (a revoked credential, a removed member): a replica that sees a new
-- value drops its cache.
CREATE TABLE cache_generations (
    name TEXT PRIMARY KEY,
    gen  INTEGER NOT NULL
);
