-- Several reviewers where one is not enough (issue 21, point 6). A quest in
-- REVIEW needs `reviews_required` first looks from as many distinct tokens
-- (the session's `review.reviewers`, fixed when the quest is made); while
-- it needs more than one, each reviewer looking holds a row of
-- `review_claims` (the quest's own claim columns serve a single decider:
-- one look, or the adjudication). Looks that disagree send the quest to an
-- adjudicator: an admin token, or a reviewer token made with `adjudicate`.
-- `look` says which a decision was; `decides` marks the one decision that
-- decided the quest, the only one that labels the AI verifiers' answers.

ALTER TABLE tokens ADD COLUMN adjudicate INTEGER NOT NULL DEFAULT 0 CHECK (adjudicate IN (0, 1));
ALTER TABLE quests ADD COLUMN reviews_required INTEGER NOT NULL DEFAULT 1
    CHECK (reviews_required BETWEEN 1 AND 10);
ALTER TABLE review_decisions ADD COLUMN look TEXT NOT NULL DEFAULT 'first'
    CHECK (look IN ('first', 'adjudication'));
ALTER TABLE review_decisions ADD COLUMN decides INTEGER NOT NULL DEFAULT 1 CHECK (decides IN (0, 1));

CREATE TABLE review_claims (
    quest_id       TEXT NOT NULL REFERENCES quests (id),
    reviewer_token TEXT NOT NULL REFERENCES tokens (id),
    reviewer       TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    PRIMARY KEY (quest_id, reviewer_token)
) WITHOUT ROWID;

CREATE INDEX review_decisions_token ON review_decisions (reviewer_token, quest_id);

CREATE TRIGGER quests_reviews_required_never_change
BEFORE UPDATE OF reviews_required ON quests
WHEN NEW.reviews_required <> OLD.reviews_required
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest''s number of reviewers never changes');
END;

-- REVIEW -> PASS/DONE needs the quest's number of agreeing first looks from
-- distinct tokens, or one adjudication, saying the state it moves to. (A
-- move with no such decision at all is 0005's rule to refuse.)
CREATE TRIGGER quests_review_needs_its_reviewers
BEFORE UPDATE OF state ON quests
WHEN OLD.state = 'REVIEW' AND NEW.state <> 'REVIEW'
  AND EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id
        AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
  AND NOT EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id AND d.look = 'adjudication'
        AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
  AND (SELECT count(DISTINCT coalesce(d.reviewer_token, d.id)) FROM review_decisions d
       WHERE d.quest_id = NEW.id AND d.look = 'first'
         AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
      < NEW.reviews_required
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest leaves REVIEW only when its reviewers agree or an adjudicator decides');
END;
