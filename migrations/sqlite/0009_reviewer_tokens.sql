-- Reviewers are known by their token, not by its name (issue 12, point 10):
-- a new token that reuses a revoked reviewer's name inherits neither its
-- claims nor its decisions.

-- The token that decided; NULL for decisions recorded before this migration,
-- which named the reviewer only.
ALTER TABLE review_decisions ADD COLUMN reviewer_token TEXT;

-- A claim names its token as `<token id>/<name>`, like a lease's agent. A
-- claim made before named a reviewer only, and a name may have been worn by a
-- revoked token and then by its live replacement: no claim can be given to a
-- token for sure, so every one is given up (they last 15 minutes; the
-- reviewer claims again).
UPDATE quests SET review_claimed_by = NULL, review_claim_expires_at = NULL
WHERE review_claimed_by IS NOT NULL OR review_claim_expires_at IS NOT NULL;
