-- The server's secrets, never served: the keys of its draws (which quests of
-- a session with review.overlap_rate need the extra looks). Each is made on
-- first use; the replicas of one database share them.

CREATE TABLE server_secrets (
    name       TEXT PRIMARY KEY,
    secret     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
