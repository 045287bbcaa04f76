-- The context vault (docs/context-vault.md). The server keeps ciphertext,
-- wrapped keys and server-visible descriptors; never an entry's content.
-- Its PostgreSQL twin is ../postgres/0002_context_vault.sql.

-- A context source: an end-to-end encrypted vault, or a git repository of
-- markdown. epoch is a vault's current epoch (0: none published yet);
-- head_seq numbers the source's events (taken under the row's lock, so
-- sequence order is commit order on every engine).
CREATE TABLE cv_sources (
    id                    TEXT PRIMARY KEY,
    workspace_id          TEXT NOT NULL,
    kind                  TEXT NOT NULL CHECK (kind IN ('vault', 'git')),
    name                  TEXT NOT NULL,
    description           TEXT NOT NULL DEFAULT '',
    use_when              TEXT NOT NULL DEFAULT '',
    update_when           TEXT NOT NULL DEFAULT '',
    repo_url              TEXT NOT NULL DEFAULT '',
    provider              TEXT NOT NULL DEFAULT '',
    branch                TEXT NOT NULL DEFAULT '',
    head_commit           TEXT NOT NULL DEFAULT '',
    sync_state            TEXT NOT NULL DEFAULT '',
    epoch                 BIGINT NOT NULL DEFAULT 0,
    head_seq              BIGINT NOT NULL DEFAULT 0,
    rotation_requested_at TEXT,
    state                 TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
    created_by            TEXT NOT NULL,
    created_at            TEXT NOT NULL,
    updated_at            TEXT NOT NULL
);
CREATE UNIQUE INDEX cv_sources_by_name ON cv_sources(workspace_id, name);

-- Users granted a source.
CREATE TABLE cv_members (
    source_id  TEXT NOT NULL REFERENCES cv_sources(id),
    user_id    BIGINT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('owner', 'member')),
    state      TEXT NOT NULL CHECK (state IN ('active', 'removed')),
    added_by   TEXT NOT NULL,
    added_at   TEXT NOT NULL,
    removed_at TEXT,
    PRIMARY KEY (source_id, user_id)
);
CREATE INDEX cv_members_by_user ON cv_members(user_id);

-- Devices: public keys only. A device belongs to the user who approved
-- its machine's pairing, and speaks through that install.
CREATE TABLE cv_devices (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    user_id      BIGINT NOT NULL,
    install_id   TEXT NOT NULL,
    name         TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    signing_key  TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'active', 'revoked')),
    approved_by  TEXT NOT NULL DEFAULT '',
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    revoked_at   TEXT
);
CREATE INDEX cv_devices_by_user ON cv_devices(workspace_id, user_id);
CREATE INDEX cv_devices_by_install ON cv_devices(install_id);
CREATE UNIQUE INDEX cv_devices_by_recipient ON cv_devices(workspace_id, recipient);

CREATE TABLE cv_epochs (
    source_id  TEXT NOT NULL REFERENCES cv_sources(id),
    epoch      BIGINT NOT NULL,
    created_by TEXT NOT NULL,
    reason     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (source_id, epoch)
);

-- Epoch keys wrapped to devices (age ciphertext, base64).
CREATE TABLE cv_keys (
    source_id       TEXT NOT NULL REFERENCES cv_sources(id),
    epoch           BIGINT NOT NULL,
    device_id       TEXT NOT NULL REFERENCES cv_devices(id),
    wrapped         TEXT NOT NULL,
    wrapped_by      TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('emitted', 'materialized')),
    created_at      TEXT NOT NULL,
    materialized_at TEXT,
    PRIMARY KEY (source_id, epoch, device_id)
);
CREATE INDEX cv_keys_by_device ON cv_keys(device_id);

-- The append-only log of a source: sealed entry events, or the
-- descriptors of a git source's documents.
CREATE TABLE cv_events (
    source_id   TEXT NOT NULL REFERENCES cv_sources(id),
    seq         BIGINT NOT NULL,
    event_id    TEXT NOT NULL,
    entry_id    TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('put', 'delete', 'doc')),
    epoch       BIGINT NOT NULL,
    base        TEXT NOT NULL DEFAULT '',
    use_when    TEXT NOT NULL DEFAULT '',
    update_when TEXT NOT NULL DEFAULT '',
    path        TEXT NOT NULL DEFAULT '',
    commit_sha  TEXT NOT NULL DEFAULT '',
    ciphertext  TEXT NOT NULL DEFAULT '',
    digest      TEXT NOT NULL,
    device_id   TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (source_id, seq)
);
CREATE UNIQUE INDEX cv_events_by_id ON cv_events(source_id, event_id);
CREATE INDEX cv_events_by_entry ON cv_events(source_id, entry_id);

-- Revocations, kept for the audit of their enforcement (the rotation).
CREATE TABLE cv_revocations (
    id             TEXT PRIMARY KEY,
    workspace_id   TEXT NOT NULL,
    source_id      TEXT NOT NULL DEFAULT '',
    kind           TEXT NOT NULL CHECK (kind IN ('device', 'member')),
    device_id      TEXT NOT NULL DEFAULT '',
    user_id        BIGINT NOT NULL,
    revoked_by     TEXT NOT NULL,
    revoked_at     TEXT NOT NULL
);
CREATE INDEX cv_revocations_by_workspace ON cv_revocations(workspace_id);

-- Context corrections waiting for a human: sealed to the source's devices
-- on arrival; the seal is dropped once decided.
CREATE TABLE cv_proposals (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    source_id       TEXT NOT NULL REFERENCES cv_sources(id),
    session_id      TEXT NOT NULL,
    correction_kind TEXT NOT NULL,
    target_kind     TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'previewed', 'accepted', 'rejected')),
    digest          TEXT NOT NULL,
    sealed          TEXT NOT NULL DEFAULT '',
    sealed_to       TEXT NOT NULL DEFAULT '[]',
    proof_id        TEXT NOT NULL DEFAULT '',
    event_id        TEXT NOT NULL DEFAULT '',
    writeback       TEXT NOT NULL DEFAULT '',
    created_by      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    decided_by      TEXT NOT NULL DEFAULT '',
    decided_at      TEXT,
    reason          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX cv_proposals_by_source ON cv_proposals(workspace_id, source_id, state);

CREATE TABLE cv_proofs (
    id               TEXT PRIMARY KEY,
    workspace_id     TEXT NOT NULL,
    proposal_id      TEXT NOT NULL DEFAULT '',
    source_id        TEXT NOT NULL,
    candidate_digest TEXT NOT NULL,
    base_seq         BIGINT NOT NULL,
    device_id        TEXT NOT NULL,
    mac              TEXT NOT NULL,
    issued_at        TEXT NOT NULL
);

-- A device identity sealed with its user's recovery key.
CREATE TABLE cv_backups (
    workspace_id TEXT NOT NULL,
    device_id    TEXT NOT NULL REFERENCES cv_devices(id),
    user_id      BIGINT NOT NULL,
    sealed       TEXT NOT NULL,
    generation   BIGINT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (workspace_id, device_id)
);

-- The sources a session's working set holds, as last composed.
CREATE TABLE cv_working_sets (
    workspace_id TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    task         TEXT NOT NULL,
    source_ids   TEXT NOT NULL,
    composed_at  TEXT NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);
