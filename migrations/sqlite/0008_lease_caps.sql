-- One token cannot hog a session or grow a table forever (issue 12, point 5).

-- The most leases a token may hold at once; NULL: no cap. Agent tokens get 64
-- unless their creator asks otherwise, admin tokens none.
ALTER TABLE tokens ADD COLUMN max_leases INTEGER CHECK (max_leases IS NULL OR max_leases >= 1);
UPDATE tokens SET max_leases = 64 WHERE role = 'agent';

-- The cap counts a token's live leases (agents are `<token id>/<name>`, so a
-- token's leases are one range of this index); the pruning reads a quest's leases.
CREATE INDEX leases_live_by_token ON leases (agent) WHERE ended_at IS NULL;
CREATE INDEX leases_by_quest ON leases (quest_id, id);

-- Every lease a quest was ever granted, counted in the claim itself: old lease
-- rows are pruned (below, and by the store at each claim), the count stays.
ALTER TABLE quests ADD COLUMN leases INTEGER NOT NULL DEFAULT 0 CHECK (leases >= 0);
UPDATE quests SET leases = (SELECT COUNT(*) FROM leases l WHERE l.quest_id = quests.id)
WHERE EXISTS (SELECT 1 FROM leases l WHERE l.quest_id = quests.id);

CREATE TRIGGER quests_leases_never_decrease
BEFORE UPDATE OF leases ON quests
WHEN NEW.leases < OLD.leases
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest''s lease count never decreases');
END;

-- Only history is pruned: a live lease holds its quest, and a lease that a
-- submission was made under stays with it (the foreign key refuses that too).
CREATE TRIGGER leases_live_are_never_deleted
BEFORE DELETE ON leases
WHEN OLD.ended_at IS NULL
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a live lease is never deleted');
END;

-- The history before this migration, bounded as the store bounds it from now
-- on: the last 8 ended leases of each quest without a submission under them.
DELETE FROM leases WHERE id IN (
    SELECT id FROM (
        SELECT l.id, row_number() OVER (PARTITION BY l.quest_id ORDER BY l.id DESC) AS n
        FROM leases l
        WHERE l.ended_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM submissions s WHERE s.lease_id = l.id))
    WHERE n > 8);
