-- Failure throttles shared by every replica (store.TakeBucket): a token
-- bucket per name and key (for example failed pairing lookups per client
-- address), so N replicas do not allow N times the guesses.
-- Its PostgreSQL twin is ../postgres/0008_throttles.sql.
CREATE TABLE throttle_buckets (
    name   TEXT NOT NULL,
    key    TEXT NOT NULL,
    tokens REAL NOT NULL,
    last   INTEGER NOT NULL, -- unix nanoseconds of the last refill
    PRIMARY KEY (name, key)
);
CREATE INDEX throttle_buckets_by_last ON throttle_buckets(last);
