-- Post-hoc audits (issue 22, point 5): PASS quests drawn uniformly from the
-- session's unaudited machine-decided PASS rows, each judged by a person as
-- a label of the error bound only. An audit review never changes the
-- quest's state (the quest stays PASS whatever the label); a quest is
-- audited once; a label, once given, is never changed nor deleted.

CREATE TABLE audit_reviews (
    quest_id       UUID PRIMARY KEY REFERENCES quests (id),
    session_id     UUID NOT NULL REFERENCES sessions (id),
    drawn_at       TIMESTAMPTZ NOT NULL,
    decision       TEXT CHECK (decision IN ('approve', 'reject')),
    reviewer       TEXT,
    reviewer_token UUID REFERENCES tokens (id),
    note           TEXT,
    decided_at     TIMESTAMPTZ,
    CHECK ((decision IS NULL) = (decided_at IS NULL) AND (decision IS NULL) = (reviewer IS NULL))
);

CREATE INDEX audit_reviews_session ON audit_reviews (session_id, decided_at);

CREATE FUNCTION audit_reviews_label_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refuse('an audit''s label is final');
    RETURN NULL;
END $$;

CREATE TRIGGER audit_reviews_label_is_final BEFORE UPDATE ON audit_reviews
FOR EACH ROW WHEN (OLD.decision IS NOT NULL OR NEW.quest_id <> OLD.quest_id OR NEW.session_id <> OLD.session_id)
EXECUTE FUNCTION audit_reviews_label_is_final();

CREATE FUNCTION audit_reviews_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refuse('audits are never deleted');
    RETURN NULL;
END $$;

CREATE TRIGGER audit_reviews_never_deleted BEFORE DELETE ON audit_reviews
FOR EACH ROW EXECUTE FUNCTION audit_reviews_never_deleted();
