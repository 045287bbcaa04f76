-- Directories the daemon may run sessions in. The path is the identity a user
-- types (`reeve add PATH`), so it is unique; the ULID is what the API hands out.
CREATE TABLE directories (
    id       TEXT    NOT NULL PRIMARY KEY,
    path     TEXT    NOT NULL UNIQUE,
    added_at INTEGER NOT NULL -- unix nanoseconds, UTC
);

-- Sessions keep their directory id even after the directory is removed: they
-- are history, so there is deliberately no foreign key.
CREATE TABLE sessions (
    id            TEXT    NOT NULL PRIMARY KEY,
    directory_id  TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    model         TEXT    NOT NULL DEFAULT '',
    prompt        TEXT    NOT NULL DEFAULT '',
    worktree      TEXT    NOT NULL DEFAULT '',
    workdir       TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL,
    status_reason TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    ended_at      INTEGER, -- NULL while the session is not in a terminal status
    manifest      TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX sessions_status ON sessions (status);
CREATE INDEX sessions_directory ON sessions (directory_id);
