-- Support operators (docs/support.md): a server-level role, not a
-- workspace membership, granted and revoked by an operator command
-- (`reeve server support grant|revoke EMAIL`). What an operator may see
-- of a workspace is decided per request by that workspace's owners and
-- admins (support access requests, records of the record engine).
CREATE TABLE support_operators (
    user_id    BIGINT PRIMARY KEY REFERENCES users(id),
    granted_by TEXT NOT NULL,
    granted_at TEXT NOT NULL
);
