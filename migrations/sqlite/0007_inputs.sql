-- The uploaded file moves into pieces of 1 MiB. SQLite reads a BLOB whole
-- (substr() over it loads all of it first), so a download of a large upload
-- held the whole file in memory and a paged read cost the whole file per
-- page; a piece per row is read and sent one at a time.
CREATE TABLE session_source_chunks (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    bytes       BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);

WITH RECURSIVE pieces (session_id, seq, size) AS (
    SELECT session_id, 0, length(source) FROM session_sources
    UNION ALL
    SELECT session_id, seq + 1, size FROM pieces WHERE (seq + 1) * 1048576 < size
)
INSERT INTO session_source_chunks (session_id, seq, bytes)
SELECT p.session_id, p.seq, substr(s.source, p.seq * 1048576 + 1, 1048576)
FROM pieces p JOIN session_sources s ON s.session_id = p.session_id;

DROP TABLE session_sources;
