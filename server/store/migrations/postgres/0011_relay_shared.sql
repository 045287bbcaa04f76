-- Relay presence, the relay bus and cache generations shared by every
-- replica, PostgreSQL twin of ../sqlite/0011_relay_shared.sql.
CREATE TABLE relay_instances (
    instance_id TEXT COLLATE "C" PRIMARY KEY,
    seen_at     BIGINT NOT NULL
);

CREATE TABLE relay_presence (
    workspace_id      TEXT COLLATE "C" NOT NULL,
    runtime_target_id TEXT COLLATE "C" NOT NULL,
    instance_id       TEXT COLLATE "C" NOT NULL,
    conn_id           TEXT COLLATE "C" NOT NULL,
    connected_at      BIGINT NOT NULL,
    expires_at        BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, runtime_target_id)
);
CREATE INDEX relay_presence_by_instance ON relay_presence(instance_id);

CREATE TABLE relay_bus (
    seq         BIGSERIAL PRIMARY KEY,
    instance_id TEXT COLLATE "C" NOT NULL,
    body        BYTEA NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX relay_bus_by_instance ON relay_bus(instance_id, seq);

CREATE TABLE cache_generations (
    name TEXT COLLATE "C" PRIMARY KEY,
    gen  BIGINT NOT NULL
);
