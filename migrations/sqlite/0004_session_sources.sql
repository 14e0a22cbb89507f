-- The uploaded file moves to its own table. In the sessions row it sat before
-- columns read on every lease and submit (total, max_tries, ...), so each of
-- those reads walked the file's overflow pages: a 10 MB upload made every cycle
-- of its session an order of magnitude slower.
CREATE TABLE session_sources (
    session_id  TEXT PRIMARY KEY REFERENCES sessions (id),
    source      BLOB NOT NULL
);

INSERT INTO session_sources (session_id, source) SELECT id, source FROM sessions;

ALTER TABLE sessions DROP COLUMN source;
