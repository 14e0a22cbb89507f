-- A first look counts towards a quest's reviewers only with the token that
-- gave it: decisions recorded without a token (before tokens named
-- reviewers) decide a quest that needs one look, and never stand for a
-- second reviewer (0017 counted each of them as a reviewer of its own).
-- And first looks that disagree leave the quest to an adjudicator: however
-- many agree with the move, one against it means no move without an
-- adjudication.

DROP TRIGGER quests_review_needs_its_reviewers;

CREATE TRIGGER quests_review_needs_its_reviewers
BEFORE UPDATE OF state ON quests
WHEN OLD.state = 'REVIEW' AND NEW.state <> 'REVIEW'
  AND EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id
        AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
  AND NOT EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id AND d.look = 'adjudication'
        AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
  AND ((SELECT CASE WHEN NEW.reviews_required = 1 THEN count(*) ELSE count(DISTINCT d.reviewer_token) END
       FROM review_decisions d
       WHERE d.quest_id = NEW.id AND d.look = 'first'
         AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
      < NEW.reviews_required
    OR EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id AND d.look = 'first'
        AND d.decision <> CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest leaves REVIEW only when its reviewers agree or an adjudicator decides');
END;
