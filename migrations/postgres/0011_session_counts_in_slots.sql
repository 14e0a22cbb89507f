-- A session's counts in slots: each transaction adds its moves to one of 16
-- rows per bucket (picked by its transaction id), and a read sums them. Every
-- write of a session moved quests between the same few bucket rows, so a
-- replica's batch of claims and its batch of submits, and every replica's,
-- took turns on them (measured: one replica's submits waited on its claims,
-- p50 188 ms). A slot may go below zero (a quest counted in by one
-- transaction and out by another); the sums never do.

ALTER TABLE session_counts DROP CONSTRAINT session_counts_pkey;
ALTER TABLE session_counts DROP CONSTRAINT session_counts_n_check;
ALTER TABLE session_counts ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE session_counts ADD PRIMARY KEY (session_id, bucket, slot);

CREATE OR REPLACE FUNCTION session_count_add(sid UUID, name TEXT, delta BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO session_counts (session_id, bucket, slot, n)
    VALUES (sid, name, (txid_current() % 16)::smallint, delta)
    ON CONFLICT (session_id, bucket, slot) DO UPDATE SET n = session_counts.n + excluded.n;
END $$;
