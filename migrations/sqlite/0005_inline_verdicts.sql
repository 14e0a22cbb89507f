-- A gate that decides at once (no I/O) runs in the request, and its submission
-- is recorded together with its verdict: the quest moves from `leased` straight
-- to its decided state. That is the one new edge, and only with its submission.
-- The rest closes moves the triggers used to allow without their proof.

-- The last two FAILs carried the same facts: set when a FAIL is applied, so a
-- lease needs no read of the quest's history to warn of a doom loop.
ALTER TABLE quests ADD COLUMN repeated_failure INTEGER NOT NULL DEFAULT 0
    CHECK (repeated_failure IN (0, 1));

UPDATE quests SET repeated_failure = 1
WHERE state = 'TODO' AND (
    SELECT COUNT(*) = 2 AND MIN(facts) = MAX(facts) FROM (
        SELECT facts FROM submissions s
        WHERE s.quest_id = quests.id AND s.verdict = 'FAIL'
        ORDER BY created_at DESC, id DESC LIMIT 2));

-- The phase moves of a TODO quest (NULL is a terminal state):
--   open -> leased; leased -> open | checking | verifying | NULL;
--   checking -> leased (FAIL) | verifying | NULL; verifying -> NULL.
DROP TRIGGER quests_phase_moves;
CREATE TRIGGER quests_phase_moves
BEFORE UPDATE OF phase ON quests
WHEN NEW.phase IS NOT OLD.phase
  AND NOT ((OLD.phase = 'open' AND NEW.phase = 'leased')
        OR (OLD.phase = 'leased' AND (NEW.phase IN ('open', 'checking', 'verifying') OR NEW.phase IS NULL))
        OR (OLD.phase = 'checking' AND (NEW.phase IN ('leased', 'verifying') OR NEW.phase IS NULL))
        OR (OLD.phase = 'verifying' AND NEW.phase IS NULL))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: illegal phase move');
END;

DROP TRIGGER quests_verifying_only_after_checking;
CREATE TRIGGER quests_verifying_only_after_a_pass
BEFORE UPDATE OF phase ON quests
WHEN NEW.phase = 'verifying' AND OLD.phase IS NOT 'checking' AND OLD.phase IS NOT 'leased'
  AND OLD.phase IS NOT 'verifying'
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest is verified only after its gate passed it');
END;

-- Every verdict on a quest is backed by its decided submission, of the lease
-- that held the quest, saying the state and tries the quest moves to: the move
-- out of `checking`, and a move out of `leased` that is no release or lapse.
CREATE TRIGGER quests_verdicts_have_their_submission
BEFORE UPDATE ON quests
WHEN ((OLD.phase = 'checking' AND NEW.phase IS NOT 'checking')
      OR (OLD.phase = 'leased' AND NEW.lapses = OLD.lapses
          AND (NEW.phase IS NULL OR NEW.phase = 'verifying' OR NEW.tries <> OLD.tries)))
  AND NOT EXISTS (
      SELECT 1 FROM submissions s
      WHERE s.id = NEW.submission_id AND s.quest_id = NEW.id AND s.lease_id = OLD.lease_id
        AND s.verdict <> 'PENDING' AND s.state_after = NEW.state AND s.tries_after = NEW.tries)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a verdict needs its decided submission');
END;

-- In a session with AI verifiers, an L1 PASS goes to `verifying` first.
CREATE TRIGGER quests_verified_sessions_pass_through_the_verifiers
BEFORE UPDATE OF state ON quests
WHEN NEW.state = 'PASS' AND OLD.state = 'TODO' AND OLD.phase IS NOT 'verifying'
  AND json_extract((SELECT config FROM sessions WHERE id = NEW.session_id), '$.verify') IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a PASS in a session with AI verifiers goes through them');
END;

-- Only a reviewer's recorded decision ends a quest in REVIEW.
CREATE TRIGGER quests_review_ends_by_a_decision
BEFORE UPDATE OF state ON quests
WHEN OLD.state = 'REVIEW' AND NEW.state <> 'REVIEW'
  AND NOT EXISTS (
      SELECT 1 FROM review_decisions d
      WHERE d.quest_id = NEW.id
        AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest leaves REVIEW only by a recorded review decision');
END;

CREATE TRIGGER quests_tries_stay_within_the_limit
BEFORE UPDATE OF tries ON quests
WHEN NEW.tries > (SELECT max_tries FROM sessions WHERE id = NEW.session_id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: tries never exceed the session''s max_tries');
END;

CREATE TRIGGER quests_start_within_the_limits
BEFORE INSERT ON quests
WHEN NEW.tries <> 0 OR NEW.lapses <> 0 OR NEW.state <> 'TODO' OR NEW.phase IS NOT 'open'
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest starts open, without tries or lapses');
END;

-- A quest's identity never changes: without this, `UPDATE OR REPLACE` moving
-- one quest onto another's (session_id, row_index) deletes that quest without
-- firing the no-delete trigger.
CREATE TRIGGER quests_identity_is_fixed
BEFORE UPDATE OF id, session_id, row_index, key, input ON quests
WHEN NEW.id IS NOT OLD.id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.row_index IS NOT OLD.row_index OR NEW.key IS NOT OLD.key OR NEW.input IS NOT OLD.input
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest''s id, session, row, key and input never change');
END;
