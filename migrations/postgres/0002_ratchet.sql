-- The ratchet, enforced below the application: every rule the SQLite triggers
-- of migrations/sqlite/0001, 0002 and 0005 hold, as PL/pgSQL. A refusal raises
-- SQLSTATE 23000 (integrity_constraint_violation) with a message starting
-- `ratchet:`, so the store tells a refused write from a failed database.
--
-- Two differences from SQLite, both of them PostgreSQL's: there is no
-- `INSERT OR REPLACE` (an upsert is an UPDATE and meets the update rules, so
-- the "ids are never reused" triggers have nothing to guard), and TRUNCATE
-- skips row triggers, so the append-only tables refuse TRUNCATE as well.

CREATE FUNCTION ratchet_refuse(message TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ratchet: %', message USING ERRCODE = 'integrity_constraint_violation';
END $$;

-- Quests ---------------------------------------------------------------------------

CREATE FUNCTION quests_start_within_the_limits() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tries <> 0 OR NEW.lapses <> 0 OR NEW.state <> 'TODO' OR NEW.phase IS DISTINCT FROM 'open' THEN
        PERFORM ratchet_refuse('a quest starts open, without tries or lapses');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER quests_start_within_the_limits BEFORE INSERT ON quests
FOR EACH ROW EXECUTE FUNCTION quests_start_within_the_limits();

-- Every rule on a quest's update, in the order the SQLite triggers list them.
-- `o` and `n` are the old and new phase, with '-' for none (a terminal state).
CREATE FUNCTION quests_ratchet() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o TEXT := COALESCE(OLD.phase, '-');
    n TEXT := COALESCE(NEW.phase, '-');
BEGIN
    -- A quest's identity never changes.
    IF NEW.id <> OLD.id OR NEW.session_id <> OLD.session_id OR NEW.row_index <> OLD.row_index
       OR NEW.key <> OLD.key OR NEW.input::text <> OLD.input::text THEN
        PERFORM ratchet_refuse('a quest''s id, session, row, key and input never change');
    END IF;
    -- Nothing leaves PASS or DONE; REVIEW may only become PASS or DONE.
    IF (OLD.state IN ('PASS', 'DONE') AND NEW.state <> OLD.state)
       OR (OLD.state = 'REVIEW' AND NEW.state NOT IN ('REVIEW', 'PASS', 'DONE')) THEN
        PERFORM ratchet_refuse('a quest in PASS, REVIEW or DONE cannot return to TODO or change its verdict');
    END IF;
    -- A terminal quest's accepted result, receipt and tries are frozen.
    IF OLD.state IN ('PASS', 'DONE')
       AND (NEW.result::text IS DISTINCT FROM OLD.result::text OR NEW.receipt IS DISTINCT FROM OLD.receipt
            OR NEW.submission_id IS DISTINCT FROM OLD.submission_id
            OR NEW.decided_by IS DISTINCT FROM OLD.decided_by OR NEW.tries <> OLD.tries) THEN
        PERFORM ratchet_refuse('a decided quest is frozen');
    END IF;
    IF NEW.tries < OLD.tries THEN
        PERFORM ratchet_refuse('tries never decrease');
    END IF;
    IF NEW.lapses < OLD.lapses THEN
        PERFORM ratchet_refuse('lapses never decrease');
    END IF;
    IF NEW.tries > OLD.tries AND NEW.tries > (SELECT max_tries FROM sessions WHERE id = NEW.session_id) THEN
        PERFORM ratchet_refuse('tries never exceed the session''s max_tries');
    END IF;
    -- A quest under review keeps the result a person is deciding on.
    IF OLD.state = 'REVIEW'
       AND (NEW.result::text IS DISTINCT FROM OLD.result::text
            OR NEW.submission_id IS DISTINCT FROM OLD.submission_id OR NEW.tries <> OLD.tries) THEN
        PERFORM ratchet_refuse('a quest in REVIEW keeps the result under review');
    END IF;
    -- The phase moves of a TODO quest:
    --   open -> leased; leased -> open | checking | verifying | none;
    --   checking -> leased (FAIL) | verifying | none; verifying -> none.
    IF n <> o AND NOT ((o = 'open' AND n = 'leased')
                    OR (o = 'leased' AND n IN ('open', 'checking', 'verifying', '-'))
                    OR (o = 'checking' AND n IN ('leased', 'verifying', '-'))
                    OR (o = 'verifying' AND n = '-')) THEN
        PERFORM ratchet_refuse('illegal phase move');
    END IF;
    IF n = 'verifying' AND o NOT IN ('checking', 'leased', 'verifying') THEN
        PERFORM ratchet_refuse('a quest is verified only after its gate passed it');
    END IF;
    -- L2 can never FAIL a quest, reopen it, or end it in DONE.
    IF o = 'verifying' AND NOT (NEW.state IN ('PASS', 'REVIEW') OR (NEW.state = 'TODO' AND n = 'verifying')) THEN
        PERFORM ratchet_refuse('AI verifiers may only pass a quest on or send it to REVIEW');
    END IF;
    -- While verifiers look, and after, what they look at is frozen.
    IF o = 'verifying'
       AND (NEW.tries <> OLD.tries OR NEW.lapses <> OLD.lapses
            OR NEW.result::text IS DISTINCT FROM OLD.result::text
            OR NEW.submission_id IS DISTINCT FROM OLD.submission_id OR NEW.lease_id IS NOT NULL) THEN
        PERFORM ratchet_refuse('L2 never changes tries, the result or the lease of a quest');
    END IF;
    -- Every verdict on a quest is backed by its decided submission, of the lease
    -- that held the quest, saying the state and tries the quest moves to.
    IF ((o = 'checking' AND n <> 'checking')
        OR (o = 'leased' AND NEW.lapses = OLD.lapses AND (n IN ('-', 'verifying') OR NEW.tries <> OLD.tries)))
       AND NOT EXISTS (
           SELECT 1 FROM submissions s
           WHERE s.id = NEW.submission_id AND s.quest_id = NEW.id AND s.lease_id = OLD.lease_id
             AND s.verdict <> 'PENDING' AND s.state_after = NEW.state AND s.tries_after = NEW.tries) THEN
        PERFORM ratchet_refuse('a verdict needs its decided submission');
    END IF;
    -- In a session with AI verifiers, an L1 PASS goes to `verifying` first.
    IF NEW.state = 'PASS' AND OLD.state = 'TODO' AND o <> 'verifying'
       AND COALESCE((SELECT json_typeof(config -> 'verify') <> 'null' FROM sessions WHERE id = NEW.session_id), false) THEN
        PERFORM ratchet_refuse('a PASS in a session with AI verifiers goes through them');
    END IF;
    -- Only a reviewer's recorded decision ends a quest in REVIEW.
    IF OLD.state = 'REVIEW' AND NEW.state <> 'REVIEW'
       AND NOT EXISTS (
           SELECT 1 FROM review_decisions d
           WHERE d.quest_id = NEW.id
             AND d.decision = CASE NEW.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END) THEN
        PERFORM ratchet_refuse('a quest leaves REVIEW only by a recorded review decision');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER quests_ratchet BEFORE UPDATE ON quests
FOR EACH ROW EXECUTE FUNCTION quests_ratchet();

-- Append-only tables ----------------------------------------------------------------

-- Refuses the operation outright; the message is the trigger's argument.
CREATE FUNCTION ratchet_refuse_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refuse(TG_ARGV[0]);
    RETURN NULL;
END $$;

CREATE TRIGGER quests_are_never_deleted BEFORE DELETE ON quests
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('quests are never deleted');
CREATE TRIGGER quests_are_never_truncated BEFORE TRUNCATE ON quests
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('quests are never deleted');

-- Submissions are append-only: a verdict is written once, and nothing else changes.
CREATE FUNCTION submissions_verdict_written_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.verdict <> 'PENDING' OR NEW.result::text <> OLD.result::text
       OR NEW.lease_id <> OLD.lease_id OR NEW.quest_id <> OLD.quest_id OR NEW.id <> OLD.id THEN
        PERFORM ratchet_refuse('submissions are append-only');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER submissions_verdict_written_once BEFORE UPDATE ON submissions
FOR EACH ROW EXECUTE FUNCTION submissions_verdict_written_once();
CREATE TRIGGER submissions_are_never_deleted BEFORE DELETE ON submissions
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('submissions are never deleted');
CREATE TRIGGER submissions_are_never_truncated BEFORE TRUNCATE ON submissions
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('submissions are never deleted');

CREATE TRIGGER review_decisions_are_never_changed BEFORE UPDATE ON review_decisions
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('review decisions are append-only');
CREATE TRIGGER review_decisions_are_never_deleted BEFORE DELETE ON review_decisions
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('review decisions are never deleted');
CREATE TRIGGER review_decisions_are_never_truncated BEFORE TRUNCATE ON review_decisions
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('review decisions are never deleted');

-- L2 answers and decisions are append-only; a job is answered once and never deleted.
CREATE TRIGGER l2_answers_are_never_changed BEFORE UPDATE ON l2_answers
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('L2 answers are append-only');
CREATE TRIGGER l2_answers_are_never_deleted BEFORE DELETE ON l2_answers
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('L2 answers are append-only');
CREATE TRIGGER l2_answers_are_never_truncated BEFORE TRUNCATE ON l2_answers
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('L2 answers are append-only');
CREATE TRIGGER l2_decisions_are_never_changed BEFORE UPDATE ON l2_decisions
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('L2 decisions are append-only');
CREATE TRIGGER l2_decisions_are_never_deleted BEFORE DELETE ON l2_decisions
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('L2 decisions are append-only');
CREATE TRIGGER l2_decisions_are_never_truncated BEFORE TRUNCATE ON l2_decisions
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('L2 decisions are append-only');

CREATE FUNCTION l2_jobs_are_answered_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'answered' OR NEW.request::text <> OLD.request::text
       OR NEW.submission_id <> OLD.submission_id OR NEW.verifier <> OLD.verifier
       OR NEW.question <> OLD.question OR NEW.flag_on <> OLD.flag_on THEN
        PERFORM ratchet_refuse('an L2 job is answered once and never rewritten');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER l2_jobs_are_answered_once BEFORE UPDATE ON l2_jobs
FOR EACH ROW EXECUTE FUNCTION l2_jobs_are_answered_once();
CREATE TRIGGER l2_jobs_are_never_deleted BEFORE DELETE ON l2_jobs
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('L2 jobs are never deleted');
CREATE TRIGGER l2_jobs_are_never_truncated BEFORE TRUNCATE ON l2_jobs
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('L2 jobs are never deleted');
