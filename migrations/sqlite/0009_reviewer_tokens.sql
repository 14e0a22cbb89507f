-- Reviewers are known by their token, not by its name (issue 12, point 10):
-- a new token that reuses a revoked reviewer's name inherits neither its
-- claims nor its decisions.

-- The token that decided; NULL for decisions recorded before this migration,
-- which named the reviewer only.
ALTER TABLE review_decisions ADD COLUMN reviewer_token TEXT;

-- A claim names its token as `<token id>/<name>`, like a lease's agent. A claim
-- made before names a live token by its name (names are unique among live
-- tokens); a claim whose token is gone is given up.
UPDATE quests SET review_claimed_by = (
    SELECT t.id || '/' || t.name FROM tokens t
    WHERE t.name = quests.review_claimed_by AND t.revoked_at IS NULL)
WHERE review_claimed_by IS NOT NULL;
UPDATE quests SET review_claim_expires_at = NULL
WHERE review_claimed_by IS NULL AND review_claim_expires_at IS NOT NULL;
