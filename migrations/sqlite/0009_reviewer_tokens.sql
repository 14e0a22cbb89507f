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

-- Revoking a token gives up its review claims at once: otherwise they would
-- keep every other reviewer, its replacement too, out for up to 15 minutes.
-- Claims are held on quests in REVIEW only, and name `<token id>/<name>`.
CREATE TRIGGER review_claims_end_with_their_token
AFTER UPDATE OF revoked_at ON tokens
WHEN NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL
BEGIN
    UPDATE quests SET review_claimed_by = NULL, review_claim_expires_at = NULL
    WHERE state = 'REVIEW'
      AND review_claimed_by >= NEW.id || '/' AND review_claimed_by < NEW.id || '0';
END;
