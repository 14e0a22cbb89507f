-- Known answers (issue 22, point 1). A gold item is a template: each
-- hand-out makes a new quest for one token. Those quests live in the
-- session's gold companion (`sessions.gold_of` names the real session), so
-- that they are never among the real session's counts, exports, claims,
-- quality figures or a gate's result holders; `gold_quests` ties each to
-- its item and token. Items and hand-outs are never changed nor deleted.

ALTER TABLE sessions ADD COLUMN gold_of TEXT REFERENCES sessions (id);
CREATE UNIQUE INDEX sessions_gold_of ON sessions (gold_of) WHERE gold_of IS NOT NULL;

CREATE TABLE gold_items (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    kind        TEXT NOT NULL CHECK (kind IN ('gold', 'canary')),
    input       TEXT NOT NULL,
    expected    TEXT,
    compare     TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    UNIQUE (session_id, seq),
    CHECK ((kind = 'gold') = (expected IS NOT NULL))
);

CREATE TABLE gold_quests (
    quest_id    TEXT PRIMARY KEY REFERENCES quests (id),
    item_id     TEXT NOT NULL REFERENCES gold_items (id),
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    handed_at   TEXT NOT NULL,
    UNIQUE (item_id, token_id)
) WITHOUT ROWID;

CREATE INDEX gold_quests_token ON gold_quests (session_id, token_id);

CREATE TRIGGER sessions_gold_of_is_fixed
BEFORE UPDATE OF gold_of ON sessions
WHEN NEW.gold_of IS NOT OLD.gold_of
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a gold companion belongs to its session for good');
END;

CREATE TRIGGER gold_items_are_never_changed
BEFORE UPDATE ON gold_items
BEGIN
    SELECT RAISE(ABORT, 'ratchet: gold items are never changed nor deleted');
END;

CREATE TRIGGER gold_items_are_never_deleted
BEFORE DELETE ON gold_items
BEGIN
    SELECT RAISE(ABORT, 'ratchet: gold items are never changed nor deleted');
END;

CREATE TRIGGER gold_quests_are_never_changed
BEFORE UPDATE ON gold_quests
BEGIN
    SELECT RAISE(ABORT, 'ratchet: gold hand-outs are never changed nor deleted');
END;

CREATE TRIGGER gold_quests_are_never_deleted
BEFORE DELETE ON gold_quests
BEGIN
    SELECT RAISE(ABORT, 'ratchet: gold hand-outs are never changed nor deleted');
END;
