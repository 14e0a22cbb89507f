-- Known answers (issue 22, point 1). A gold item is a template: each
-- hand-out makes a new quest for one token. Those quests live in the
-- session's gold companion (`sessions.gold_of` names the real session), so
-- that they are never among the real session's counts, exports, claims,
-- quality figures or a gate's result holders; `gold_quests` ties each to
-- its item and token. Items and hand-outs are never changed nor deleted.

ALTER TABLE sessions ADD COLUMN gold_of UUID REFERENCES sessions (id);
CREATE UNIQUE INDEX sessions_gold_of ON sessions (gold_of) WHERE gold_of IS NOT NULL;

CREATE TABLE gold_items (
    id          UUID PRIMARY KEY,
    session_id  UUID NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    kind        TEXT NOT NULL CHECK (kind IN ('gold', 'canary')),
    input       JSON NOT NULL,
    expected    JSON,
    compare     JSON NOT NULL DEFAULT '{}',
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (session_id, seq),
    CHECK ((kind = 'gold') = (expected IS NOT NULL))
);

CREATE TABLE gold_quests (
    quest_id    UUID PRIMARY KEY REFERENCES quests (id),
    item_id     UUID NOT NULL REFERENCES gold_items (id),
    session_id  UUID NOT NULL REFERENCES sessions (id),
    token_id    UUID NOT NULL REFERENCES tokens (id),
    handed_at   TIMESTAMPTZ NOT NULL,
    UNIQUE (item_id, token_id)
);

CREATE INDEX gold_quests_token ON gold_quests (session_id, token_id);

CREATE FUNCTION sessions_gold_of_is_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refuse('a gold companion belongs to its session for good');
    RETURN NULL;
END $$;

CREATE TRIGGER sessions_gold_of_is_fixed BEFORE UPDATE OF gold_of ON sessions
FOR EACH ROW WHEN (NEW.gold_of IS DISTINCT FROM OLD.gold_of)
EXECUTE FUNCTION sessions_gold_of_is_fixed();

CREATE TRIGGER gold_items_are_final BEFORE UPDATE OR DELETE ON gold_items
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('gold items are never changed nor deleted');
CREATE TRIGGER gold_items_are_never_truncated BEFORE TRUNCATE ON gold_items
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('gold items are never changed nor deleted');

CREATE TRIGGER gold_quests_are_final BEFORE UPDATE OR DELETE ON gold_quests
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('gold hand-outs are never changed nor deleted');
CREATE TRIGGER gold_quests_are_never_truncated BEFORE TRUNCATE ON gold_quests
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('gold hand-outs are never changed nor deleted');
