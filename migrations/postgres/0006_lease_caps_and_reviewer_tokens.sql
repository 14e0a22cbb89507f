-- migrations/sqlite/0008 and 0009 on PostgreSQL: lease caps per token, a
-- bounded lease history, and reviewers known by their token.

-- The most leases a token may hold at once; NULL: no cap. Agent tokens get 64
-- unless their creator asks otherwise, admin tokens none.
ALTER TABLE tokens ADD COLUMN max_leases INTEGER CHECK (max_leases IS NULL OR max_leases >= 1);
UPDATE tokens SET max_leases = 64 WHERE role = 'agent';

-- The cap counts a token's live leases (agents are `<token id>/<name>`, the
-- id 36 characters); the pruning reads a quest's leases.
CREATE INDEX leases_live_by_token ON leases (left(agent, 36)) WHERE ended_at IS NULL;
CREATE INDEX leases_by_quest ON leases (quest_id, id);

-- Every lease a quest was ever granted, counted in the claim itself: old lease
-- rows are pruned by the store at each claim, the count stays.
ALTER TABLE quests ADD COLUMN leases INTEGER NOT NULL DEFAULT 0 CHECK (leases >= 0);

CREATE FUNCTION quests_leases_never_decrease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.leases < OLD.leases THEN
        PERFORM ratchet_refuse('a quest''s lease count never decreases');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER quests_leases_never_decrease BEFORE UPDATE OF leases ON quests
FOR EACH ROW EXECUTE FUNCTION quests_leases_never_decrease();

-- Only history is pruned: a live lease holds its quest, and a lease that a
-- submission was made under stays with it (the foreign key refuses that too).
CREATE FUNCTION leases_live_are_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.ended_at IS NULL THEN
        PERFORM ratchet_refuse('a live lease is never deleted');
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER leases_live_are_never_deleted BEFORE DELETE ON leases
FOR EACH ROW EXECUTE FUNCTION leases_live_are_never_deleted();

-- The token that decided; NULL for decisions recorded before tokens were kept.
ALTER TABLE review_decisions ADD COLUMN reviewer_token UUID;
-- A review claim names its token as `<token id>/<name>`, like a lease's agent.
UPDATE quests SET review_claimed_by = (
    SELECT t.id || '/' || t.name FROM tokens t
    WHERE t.name = quests.review_claimed_by AND t.revoked_at IS NULL)
WHERE review_claimed_by IS NOT NULL;
UPDATE quests SET review_claim_expires_at = NULL
WHERE review_claimed_by IS NULL AND review_claim_expires_at IS NOT NULL;
