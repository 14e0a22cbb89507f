-- migrations/sqlite/0009's trigger on PostgreSQL: revoking a token gives up its
-- review claims at once; otherwise they would keep every other reviewer, its
-- replacement too, out for up to 15 minutes. Claims are held on quests in
-- REVIEW only, and name `<token id>/<name>`.
CREATE FUNCTION review_claims_end_with_their_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE quests SET review_claimed_by = NULL, review_claim_expires_at = NULL
    WHERE state = 'REVIEW' AND left(review_claimed_by, 37) = NEW.id::text || '/';
    RETURN NEW;
END $$;

CREATE TRIGGER review_claims_end_with_their_token AFTER UPDATE OF revoked_at ON tokens
FOR EACH ROW WHEN (NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL)
EXECUTE FUNCTION review_claims_end_with_their_token();
