-- Post-hoc audits (issue 22, point 5): PASS quests drawn uniformly from the
-- session's unaudited machine-decided PASS rows, each judged by a person as
-- a label of the error bound only. An audit review never changes the
-- quest's state (the quest stays PASS whatever the label); a quest is
-- audited once; a label, once given, is never changed nor deleted.

CREATE TABLE audit_reviews (
    quest_id       TEXT PRIMARY KEY REFERENCES quests (id),
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    drawn_at       TEXT NOT NULL,
    decision       TEXT CHECK (decision IN ('approve', 'reject')),
    reviewer       TEXT,
    reviewer_token TEXT REFERENCES tokens (id),
    note           TEXT,
    decided_at     TEXT,
    CHECK ((decision IS NULL) = (decided_at IS NULL) AND (decision IS NULL) = (reviewer IS NULL))
) WITHOUT ROWID;

CREATE INDEX audit_reviews_session ON audit_reviews (session_id, decided_at);

CREATE TRIGGER audit_reviews_label_is_final
BEFORE UPDATE ON audit_reviews
WHEN OLD.decision IS NOT NULL OR NEW.quest_id <> OLD.quest_id OR NEW.session_id <> OLD.session_id
BEGIN
    SELECT RAISE(ABORT, 'ratchet: an audit''s label is final');
END;

CREATE TRIGGER audit_reviews_never_deleted
BEFORE DELETE ON audit_reviews
BEGIN
    SELECT RAISE(ABORT, 'ratchet: audits are never deleted');
END;

-- The quality figures join a session's decisions to its quests by quest.
CREATE INDEX review_decisions_quest ON review_decisions (quest_id);
