-- Held decisions are each reviewer's (issue 21, points 2 and 6): with several
-- reviewers, two may hold a decision on one quest at once, so the key is the
-- quest and the reviewer's token. `look` is what the decision was when held
-- (a first look, or an adjudication): one that would be something else when
-- due (the looks disagreed meanwhile) is not recorded.

ALTER TABLE held_decisions DROP CONSTRAINT held_decisions_pkey;
ALTER TABLE held_decisions ADD PRIMARY KEY (quest_id, reviewer_token);
ALTER TABLE held_decisions ADD COLUMN look TEXT NOT NULL DEFAULT 'first'
    CHECK (look IN ('first', 'adjudication'));
