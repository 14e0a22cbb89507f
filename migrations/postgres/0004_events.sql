-- Events across replicas. Every write transaction that moves something
-- inserts its events here and sends one NOTIFY (delivered at commit); each
-- replica relays the events of the others to its own watchers (submit?wait=,
-- SSE). A notification may be lost (a dropped connection): the relay also
-- reads on reconnect and once a second, so an event can be late, never lost.
--
-- Sequence numbers are not commit order in PostgreSQL: a transaction may take
-- id 10 and commit after the one that took 11. The relay reads by `tx`, the id
-- of the writing transaction: every transaction older than its snapshot's
-- xmin has finished, so rows of `tx >= xmin` are read again next time, and
-- nothing that commits late is skipped.
CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    tx          XID8 NOT NULL DEFAULT pg_current_xact_id(),
    origin      UUID NOT NULL,             -- the replica (store) that wrote it
    body        JSON NOT NULL,             -- the QuestEvent
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX events_tx ON events (tx);
CREATE INDEX events_created ON events (created_at);
