-- Held decisions on the review page (issue 21, point 2): a keyboard approval
-- or rejection waits `review.undo_seconds` before it is recorded, so that one
-- slip can be undone (`z`). Until `effective_at` the row is only a wish: the
-- reviewer keeps the quest's claim, and undoing deletes the row. At
-- `effective_at` a worker takes the row (`taken_until`, so that one worker
-- records it), records the decision through the ordinary decide and deletes
-- the row in the same transaction; when that is refused (the quest was decided
-- meanwhile, or its claim went to another), `outcome` keeps the refusal's code
-- until the reviewer's page has said so. Not part of the audit trail: the
-- review_decisions row is the record.

CREATE TABLE held_decisions (
    quest_id       UUID PRIMARY KEY REFERENCES quests (id),
    reviewer       TEXT NOT NULL,
    reviewer_token UUID NOT NULL REFERENCES tokens (id),
    decision       TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    note           TEXT NOT NULL,
    held_at        TIMESTAMPTZ NOT NULL,
    effective_at   TIMESTAMPTZ NOT NULL,
    taken_until    TIMESTAMPTZ,
    outcome        TEXT
);

CREATE INDEX held_decisions_due ON held_decisions (effective_at) WHERE outcome IS NULL;
CREATE INDEX held_decisions_reviewer ON held_decisions (reviewer_token, held_at);
