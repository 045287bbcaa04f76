-- Failure throttles shared by every replica, PostgreSQL twin of
-- ../sqlite/0008_throttles.sql.
CREATE TABLE throttle_buckets (
    name   TEXT COLLATE "C" NOT NULL,
    key    TEXT COLLATE "C" NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    last   BIGINT NOT NULL,
    PRIMARY KEY (name, key)
);
CREATE INDEX throttle_buckets_by_last ON throttle_buckets(last);
