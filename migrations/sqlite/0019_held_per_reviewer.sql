-- Held decisions are each reviewer's (issue 21, points 2 and 6): with several
-- reviewers, two may hold a decision on one quest at once, so the key is the
-- quest and the reviewer's token. `look` is what the decision was when held
-- (a first look, or an adjudication): one that would be something else when
-- due (the looks disagreed meanwhile) is not recorded.

CREATE TABLE held_decisions_keyed (
    quest_id       TEXT NOT NULL REFERENCES quests (id),
    reviewer       TEXT NOT NULL,
    reviewer_token TEXT NOT NULL REFERENCES tokens (id),
    decision       TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    note           TEXT NOT NULL,
    held_at        TEXT NOT NULL,
    effective_at   TEXT NOT NULL,
    taken_until    TEXT,
    outcome        TEXT,
    look           TEXT NOT NULL DEFAULT 'first' CHECK (look IN ('first', 'adjudication')),
    PRIMARY KEY (quest_id, reviewer_token)
) WITHOUT ROWID;

INSERT INTO held_decisions_keyed
    (quest_id, reviewer, reviewer_token, decision, note, held_at, effective_at, taken_until, outcome)
SELECT quest_id, reviewer, reviewer_token, decision, note, held_at, effective_at, taken_until, outcome
FROM held_decisions;

DROP TABLE held_decisions;
ALTER TABLE held_decisions_keyed RENAME TO held_decisions;

CREATE INDEX held_decisions_due ON held_decisions (effective_at) WHERE outcome IS NULL;
CREATE INDEX held_decisions_reviewer ON held_decisions (reviewer_token, held_at);
