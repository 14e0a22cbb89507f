-- Several reviewers where one is not enough (issue 21, point 6). A quest in
-- REVIEW needs `reviews_required` first looks from as many distinct tokens
-- (the session's `review.reviewers`, fixed when the quest is made); while
-- it needs more than one, each reviewer looking holds a row of
-- `review_claims` (the quest's own claim columns serve a single decider:
-- one look, or the adjudication). Looks that disagree send the quest to an
-- adjudicator: an admin token, or a reviewer token made with `adjudicate`.
-- `look` says which a decision was; `decides` marks the one decision that
-- decided the quest, the only one that labels the AI verifiers' answers.

ALTER TABLE tokens ADD COLUMN adjudicate BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE quests ADD COLUMN reviews_required INTEGER NOT NULL DEFAULT 1
    CONSTRAINT quests_reviews_required_range CHECK (reviews_required BETWEEN 1 AND 10);
ALTER TABLE review_decisions ADD COLUMN look TEXT NOT NULL DEFAULT 'first'
    CHECK (look IN ('first', 'adjudication'));
ALTER TABLE review_decisions ADD COLUMN decides BOOLEAN NOT NULL DEFAULT true;

CREATE TABLE review_claims (
    quest_id       UUID NOT NULL REFERENCES quests (id),
    reviewer_token UUID NOT NULL REFERENCES tokens (id),
    reviewer       TEXT NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (quest_id, reviewer_token)
);

CREATE INDEX review_decisions_token ON review_decisions (reviewer_token, quest_id);

-- After quests_updated (triggers of one event fire in name order), whose
-- rule that a quest leaves REVIEW only by a recorded decision refuses a move
-- with no such decision at all: REVIEW -> PASS/DONE needs the quest's number of agreeing first looks from
-- distinct tokens, or one adjudication, saying the state it moves to; and a
-- quest's number of reviewers never changes. Set-based, over the statement's
-- rows that move out of REVIEW or touch the number.
CREATE FUNCTION quests_updated_reviews() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM CASE
        WHEN n.reviews_required <> o.reviews_required THEN
            ratchet_refused('a quest''s number of reviewers never changes')
        WHEN o.state = 'REVIEW' AND n.state <> 'REVIEW' AND looks.matching > 0 AND NOT looks.enough THEN
            ratchet_refused('a quest leaves REVIEW only when its reviewers agree or an adjudicator decides')
    END
    FROM old_rows o
    JOIN new_rows n ON n.id = o.id
    LEFT JOIN LATERAL (
        SELECT coalesce(bool_or(d.look = 'adjudication'), false)
               OR count(DISTINCT coalesce(d.reviewer_token, d.id)) FILTER (WHERE d.look = 'first')
                  >= n.reviews_required AS enough,
               count(*) AS matching
        FROM review_decisions d
        WHERE d.quest_id = n.id
          AND d.decision = CASE n.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END) AS looks
        ON o.state = 'REVIEW' AND n.state <> 'REVIEW'
    WHERE n.reviews_required <> o.reviews_required OR (o.state = 'REVIEW' AND n.state <> 'REVIEW');
    RETURN NULL;
END $$;

CREATE TRIGGER quests_updated_reviews AFTER UPDATE ON quests
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION quests_updated_reviews();
