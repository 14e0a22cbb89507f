-- The ratchet and the running figures, once per statement (issue 19, point 4).
--
-- Every rule of 0002, 0006, 0009, 0012 and 0013 holds as before, with its own
-- text (tests/api/ratchet_rules.rs lists one refused statement per rule), but
-- no longer as a PL/pgSQL call with sub-selects for every row a batch writes:
--
-- * what a row must be on its own is a CHECK constraint (a quest carries its
--   session's max_tries, so that `tries <= max_tries` is one);
-- * every rule from an old row to its new one is an AFTER ... FOR EACH
--   STATEMENT trigger over the statement's transition tables: it joins the old
--   rows to the new on `id`, refuses when the join loses a row (an id
--   changed), and checks the whole statement with one set-based query whose
--   CASE names the first rule a row breaks;
-- * the running figures (a session's counts, the console's agents, failing
--   checks, throughput, and the token endings the pause rule reads) are
--   written once per statement, grouped, in key order, so that two replicas'
--   batches take their rows' locks in the same order and cannot deadlock.
--
-- The append-only refusals stay row triggers: they fire only on a statement
-- that is refused anyway. So do the L2 figures, written one answer a statement.

-- The rules and figures this migration replaces.
DROP TRIGGER quests_start_within_the_limits ON quests;
DROP TRIGGER quests_ratchet ON quests;
DROP TRIGGER quests_leases_never_decrease ON quests;
DROP TRIGGER quests_recheck_ratchet ON quests;
DROP TRIGGER quests_count_insert ON quests;
DROP TRIGGER quests_count_update ON quests;
DROP TRIGGER console_throughput_counted ON quests;
DROP TRIGGER quests_record_their_ending ON quests;
DROP TRIGGER submissions_verdict_written_once ON submissions;
DROP TRIGGER submissions_keys_are_frozen ON submissions;
DROP TRIGGER submissions_count_insert ON submissions;
DROP TRIGGER console_submission_inserted ON submissions;
DROP TRIGGER console_submission_decided ON submissions;
DROP TRIGGER console_agent_leased ON leases;
DROP TRIGGER console_agent_lease_changed ON leases;
DROP TRIGGER leases_live_are_never_deleted ON leases;
DROP TRIGGER l2_jobs_are_answered_once ON l2_jobs;
DROP TRIGGER recheck_runs_finish_once ON recheck_runs;
DROP TRIGGER token_pauses_resume_once ON token_pauses;

DROP FUNCTION quests_start_within_the_limits();
DROP FUNCTION quests_ratchet();
DROP FUNCTION quests_leases_never_decrease();
DROP FUNCTION quests_recheck_ratchet();
DROP FUNCTION quests_count_insert();
DROP FUNCTION quests_count_update();
DROP FUNCTION console_throughput_counted();
DROP FUNCTION quests_record_their_ending();
DROP FUNCTION submissions_verdict_written_once();
DROP FUNCTION submissions_keys_are_frozen();
DROP FUNCTION submissions_count_insert();
DROP FUNCTION console_submission_inserted();
DROP FUNCTION console_submission_decided();
DROP FUNCTION console_agent_verdict(submissions);
DROP FUNCTION console_facts_count(submissions);
DROP FUNCTION console_agent_leased();
DROP FUNCTION console_agent_lease_changed();
DROP FUNCTION console_agent_seen(UUID, TEXT, TIMESTAMPTZ);
DROP FUNCTION session_count_add(UUID, TEXT, BIGINT);
DROP FUNCTION leases_live_are_never_deleted();
DROP FUNCTION l2_jobs_are_answered_once();
DROP FUNCTION recheck_runs_finish_once();
DROP FUNCTION token_pauses_resume_once();

-- A refusal that a query can raise from a CASE: it never returns.
CREATE FUNCTION ratchet_refused(message TEXT) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refuse(message);
    RETURN false;
END $$;

-- The console's throughput in slots, like the counts (0011): every batch
-- that decides quests adds to the minute's row, so the batches of several
-- replicas, and several batches of one, would take turns on it. A read sums
-- the minute's slots.
ALTER TABLE console_throughput DROP CONSTRAINT console_throughput_pkey;
ALTER TABLE console_throughput ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE console_throughput ADD PRIMARY KEY (session_id, minute, slot);

-- Quests: the static rules ------------------------------------------------------------

ALTER TABLE quests ADD COLUMN max_tries INTEGER;
UPDATE quests SET max_tries = s.max_tries FROM sessions s WHERE s.id = quests.session_id;
ALTER TABLE quests ALTER COLUMN max_tries SET NOT NULL;
ALTER TABLE quests ADD CONSTRAINT quests_tries_within_max_tries CHECK (tries <= max_tries);

-- Quests start open, without tries or lapses, with their session's max_tries.
CREATE FUNCTION quests_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM CASE
        WHEN n.tries <> 0 OR n.lapses <> 0 OR n.state <> 'TODO' OR n.phase IS DISTINCT FROM 'open' THEN
            ratchet_refused('a quest starts open, without tries or lapses')
        WHEN n.max_tries <> s.max_tries THEN
            ratchet_refused('a quest starts with its session''s max_tries')
    END
    FROM new_rows n JOIN sessions s ON s.id = n.session_id;
    INSERT INTO session_counts AS c (session_id, bucket, slot, n)
    SELECT session_id, quest_bucket(state, phase), (txid_current() % 16)::smallint, count(*)
    FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (session_id, bucket, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER quests_inserted AFTER INSERT ON quests
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION quests_inserted();

-- Quests: every rule from the old row to the new, in the order of 0002's
-- function, then 0006's and 0009's; `o` and `n` are the old and new rows,
-- `op` and `np` their phases with '-' for none (a terminal state).
--
-- What a rule looks up (a verdict's submission, a review decision, a
-- re-check record) is a LATERAL lookup by key, asked only of the rows that
-- need it: a plain EXISTS lets the planner hash the whole table once per
-- statement, in a plan PL/pgSQL keeps while the table grows (measured: the
-- submit batch's update took 8.5 ms instead of 3.5 with 40,000 submissions).
CREATE FUNCTION quests_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    -- The statement's sessions with AI verifiers.
    verified UUID[] := ARRAY(
        SELECT s.id FROM (SELECT DISTINCT session_id FROM new_rows) d
        CROSS JOIN LATERAL (SELECT id, config FROM sessions WHERE id = d.session_id) s
        WHERE json_typeof(s.config -> 'verify') <> 'null');
BEGIN
    PERFORM CASE
        -- A quest's identity never changes (and its max_tries is its session's).
        WHEN n.id IS NULL OR n.session_id <> o.session_id OR n.row_index <> o.row_index
             OR n.key <> o.key OR n.input::text <> o.input::text OR n.max_tries <> o.max_tries THEN
            ratchet_refused('a quest''s id, session, row, key and input never change')
        -- Nothing leaves PASS or DONE; REVIEW may only become PASS or DONE.
        WHEN (o.state IN ('PASS', 'DONE') AND n.state <> o.state)
             OR (o.state = 'REVIEW' AND n.state NOT IN ('REVIEW', 'PASS', 'DONE')) THEN
            ratchet_refused('a quest in PASS, REVIEW or DONE cannot return to TODO or change its verdict')
        -- A terminal quest's accepted result, receipt and tries are frozen.
        WHEN o.state IN ('PASS', 'DONE')
             AND (n.result::text IS DISTINCT FROM o.result::text OR n.receipt IS DISTINCT FROM o.receipt
                  OR n.submission_id IS DISTINCT FROM o.submission_id
                  OR n.decided_by IS DISTINCT FROM o.decided_by OR n.tries <> o.tries) THEN
            ratchet_refused('a decided quest is frozen')
        WHEN n.tries < o.tries THEN ratchet_refused('tries never decrease')
        WHEN n.lapses < o.lapses THEN ratchet_refused('lapses never decrease')
        WHEN n.leases < o.leases THEN ratchet_refused('a quest''s lease count never decreases')
        -- A quest under review keeps the result a person is deciding on.
        WHEN o.state = 'REVIEW'
             AND (n.result::text IS DISTINCT FROM o.result::text
                  OR n.submission_id IS DISTINCT FROM o.submission_id OR n.tries <> o.tries) THEN
            ratchet_refused('a quest in REVIEW keeps the result under review')
        -- The phase moves of a TODO quest:
        --   open -> leased; leased -> open | checking | verifying | none;
        --   checking -> leased (FAIL) | verifying | none; verifying -> none.
        -- (So a quest is verified only after its gate passed it: `verifying`
        -- is reached from `leased` and `checking` only.)
        WHEN np <> op AND NOT ((op = 'open' AND np = 'leased')
                            OR (op = 'leased' AND np IN ('open', 'checking', 'verifying', '-'))
                            OR (op = 'checking' AND np IN ('leased', 'verifying', '-'))
                            OR (op = 'verifying' AND np = '-')) THEN
            ratchet_refused('illegal phase move')
        -- L2 can never FAIL a quest, reopen it, or end it in DONE.
        WHEN op = 'verifying' AND NOT (n.state IN ('PASS', 'REVIEW') OR (n.state = 'TODO' AND np = 'verifying')) THEN
            ratchet_refused('AI verifiers may only pass a quest on or send it to REVIEW')
        -- While verifiers look, and after, what they look at is frozen.
        WHEN op = 'verifying'
             AND (n.tries <> o.tries OR n.lapses <> o.lapses
                  OR n.result::text IS DISTINCT FROM o.result::text
                  OR n.submission_id IS DISTINCT FROM o.submission_id OR n.lease_id IS NOT NULL) THEN
            ratchet_refused('L2 never changes tries, the result or the lease of a quest')
        -- Every verdict on a quest is backed by its decided submission, of the
        -- lease that held the quest, saying the state and tries the quest moves to.
        WHEN proves AND proof.found IS NULL THEN
            ratchet_refused('a verdict needs its decided submission')
        -- In a session with AI verifiers, an L1 PASS goes to `verifying` first.
        WHEN n.state = 'PASS' AND o.state = 'TODO' AND op <> 'verifying' AND n.session_id = ANY (verified) THEN
            ratchet_refused('a PASS in a session with AI verifiers goes through them')
        -- Only a reviewer's recorded decision ends a quest in REVIEW.
        WHEN reviewed AND decision.found IS NULL THEN
            ratchet_refused('a quest leaves REVIEW only by a recorded review decision')
        -- A PASS quest is frozen but for its re-check columns.
        WHEN o.state = 'PASS'
             AND (n.state IS DISTINCT FROM o.state OR n.phase IS DISTINCT FROM o.phase
                  OR n.tries IS DISTINCT FROM o.tries OR n.lapses IS DISTINCT FROM o.lapses
                  OR n.leases IS DISTINCT FROM o.leases OR n.lease_id IS DISTINCT FROM o.lease_id
                  OR n.last_facts::text IS DISTINCT FROM o.last_facts::text
                  OR n.result::text IS DISTINCT FROM o.result::text
                  OR n.submission_id IS DISTINCT FROM o.submission_id
                  OR n.receipt IS DISTINCT FROM o.receipt OR n.decided_by IS DISTINCT FROM o.decided_by
                  OR n.review_claimed_by IS DISTINCT FROM o.review_claimed_by
                  OR n.review_claim_expires_at IS DISTINCT FROM o.review_claim_expires_at
                  OR n.repeated_failure IS DISTINCT FROM o.repeated_failure
                  OR n.updated_at IS DISTINCT FROM o.updated_at) THEN
            ratchet_refused('a PASS quest is frozen; only its re-check mark changes')
        WHEN n.state <> 'PASS' AND rechecked THEN
            ratchet_refused('only a PASS quest is re-checked')
        -- A quest's mark moves only with its re-check record, and says what it says.
        WHEN marked AND mark.found IS NULL THEN
            ratchet_refused('a re-check mark needs its re-check record')
    END
    FROM old_rows o
    LEFT JOIN new_rows n ON n.id = o.id
    CROSS JOIN LATERAL (SELECT COALESCE(o.phase, '-') AS op, COALESCE(n.phase, '-') AS np) AS p
    CROSS JOIN LATERAL (SELECT
        -- a verdict: the gate's answer leaves `checking`, or the lease's own
        -- submit decides (not a lapse)
        (op = 'checking' AND np <> 'checking')
            OR (op = 'leased' AND n.lapses = o.lapses AND (np IN ('-', 'verifying') OR n.tries <> o.tries))
            AS proves,
        o.state = 'REVIEW' AND n.state <> 'REVIEW' AS reviewed,
        n.recheck_mark IS DISTINCT FROM o.recheck_mark OR n.rechecked_at IS DISTINCT FROM o.rechecked_at
            OR n.recheck_facts::text IS DISTINCT FROM o.recheck_facts::text AS marked,
        n.recheck_mark IS DISTINCT FROM o.recheck_mark OR n.rechecked_at IS DISTINCT FROM o.rechecked_at
            OR n.recheck_facts::text IS DISTINCT FROM o.recheck_facts::text
            OR n.recheck_run IS DISTINCT FROM o.recheck_run AS rechecked) AS x
    -- the verdict's decided submission, of the lease that held the quest,
    -- saying the state and tries the quest moves to
    LEFT JOIN LATERAL (
        SELECT true AS found FROM submissions s
        WHERE proves AND s.id = n.submission_id AND s.quest_id = n.id AND s.lease_id = o.lease_id
          AND s.verdict <> 'PENDING' AND s.state_after = n.state AND s.tries_after = n.tries) AS proof ON true
    LEFT JOIN LATERAL (
        SELECT true AS found FROM review_decisions d
        WHERE reviewed AND d.quest_id = n.id
          AND d.decision = CASE n.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END
        LIMIT 1) AS decision ON true
    -- the latest re-check record: an older one cannot un-stale the quest
    LEFT JOIN LATERAL (
        SELECT true AS found FROM rechecks r
        WHERE marked AND r.quest_id = n.id AND r.created_at = n.rechecked_at
          AND r.mark IS NOT DISTINCT FROM n.recheck_mark AND r.facts::text = n.recheck_facts::text
          AND NOT EXISTS (SELECT 1 FROM rechecks l WHERE l.quest_id = n.id AND l.created_at > n.rechecked_at)
        LIMIT 1) AS mark ON true;

    -- The statement's moves between count buckets, per session.
    INSERT INTO session_counts AS c (session_id, bucket, slot, n)
    SELECT m.session_id, m.bucket, (txid_current() % 16)::smallint, sum(m.delta)
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    CROSS JOIN LATERAL (VALUES (o.session_id, quest_bucket(o.state, o.phase), -1),
                               (n.session_id, quest_bucket(n.state, n.phase), 1)) AS m (session_id, bucket, delta)
    WHERE o.state <> n.state OR o.phase IS DISTINCT FROM n.phase
    GROUP BY 1, 2
    HAVING sum(m.delta) <> 0
    ORDER BY 1, 2
    ON CONFLICT (session_id, bucket, slot) DO UPDATE SET n = c.n + excluded.n;

    -- Quests that left TODO (by the gate, the AI verifiers or the lapse
    -- limit), per minute of UTC, in the transaction's slot of the minute.
    -- Every state change writes `updated_at`.
    INSERT INTO console_throughput AS t (session_id, minute, slot, decided)
    SELECT n.session_id, date_trunc('minute', n.updated_at, 'UTC'), (txid_current() % 16)::smallint,
           count(*)
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE o.state = 'TODO' AND n.state <> 'TODO'
    GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (session_id, minute, slot) DO UPDATE SET decided = t.decided + excluded.decided;

    -- A leased quest that its agent's work ended (decided, or sent to the AI
    -- verifiers) counts for the agent's token in the pause rule (0012).
    INSERT INTO token_endings (session_id, token_id, quest_id, agent, done, ended_at)
    SELECT n.session_id, left(l.agent, 36)::uuid, n.id, l.agent, n.state = 'DONE', n.updated_at
    FROM old_rows o JOIN new_rows n ON n.id = o.id JOIN leases l ON l.id = o.lease_id
    WHERE o.state = 'TODO' AND (n.state <> 'TODO' OR n.phase = 'verifying')
    ORDER BY n.updated_at, n.id;
    RETURN NULL;
END $$;

CREATE TRIGGER quests_updated AFTER UPDATE ON quests
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION quests_updated();


-- Submissions -----------------------------------------------------------------------

-- The console's figures of the agents of submissions `ids`, all of one
-- statement: when `inserted`, each counts as a submission and its agent was
-- seen when it was made; each decided one counts its verdict, a PASS on its
-- agent's first submission to that quest, and the tries that PASS took.
CREATE FUNCTION console_agents_counted(ids UUID[], inserted BOOLEAN) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO console_agent_stats AS a (session_id, agent, last_seen, submissions, pass, fail,
                                          review, done, pass_first, tries_to_pass)
    SELECT s.session_id, s.agent, max(s.created_at),
           CASE WHEN inserted THEN count(*) ELSE 0 END,
           count(*) FILTER (WHERE s.verdict = 'PASS'),
           count(*) FILTER (WHERE s.verdict = 'FAIL'),
           count(*) FILTER (WHERE s.verdict = 'REVIEW'),
           count(*) FILTER (WHERE s.verdict = 'FAIL' AND s.state_after = 'DONE'),
           count(*) FILTER (WHERE s.verdict = 'PASS' AND NOT EXISTS (
               SELECT 1 FROM submissions e
               WHERE e.quest_id = s.quest_id AND e.agent = s.agent AND e.id <> s.id
                 AND (e.created_at, e.id) < (s.created_at, s.id))),
           COALESCE(sum((SELECT count(*) FROM submissions e
                          WHERE e.quest_id = s.quest_id AND e.agent = s.agent
                            AND (e.created_at, e.id) <= (s.created_at, s.id)))
                    FILTER (WHERE s.verdict = 'PASS'), 0)
    FROM submissions s
    WHERE s.id = ANY (ids)
    GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (session_id, agent) DO UPDATE SET
        last_seen = GREATEST(a.last_seen, excluded.last_seen),
        submissions = a.submissions + excluded.submissions,
        pass = a.pass + excluded.pass, fail = a.fail + excluded.fail,
        review = a.review + excluded.review, done = a.done + excluded.done,
        pass_first = a.pass_first + excluded.pass_first,
        tries_to_pass = a.tries_to_pass + excluded.tries_to_pass;
END $$;

-- The facts of the FAIL and REVIEW verdicts among submissions `ids`, counted
-- by check and field; the latest fact of a (check, field) is its example.
CREATE FUNCTION console_facts_counted(ids UUID[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO console_fact_counts AS c (session_id, check_name, field, fails, reviews, quest_id,
                                          submission_id, expected, actual, hint, last_at)
    SELECT f.session_id, f.check_name, f.field,
           count(*) FILTER (WHERE f.verdict = 'FAIL'),
           count(*) FILTER (WHERE f.verdict = 'REVIEW'),
           (array_agg(f.quest_id ORDER BY f.at DESC, f.submission_id DESC, f.ord DESC))[1],
           (array_agg(f.submission_id ORDER BY f.at DESC, f.submission_id DESC, f.ord DESC))[1],
           (array_agg(f.expected ORDER BY f.at DESC, f.submission_id DESC, f.ord DESC))[1],
           (array_agg(f.actual ORDER BY f.at DESC, f.submission_id DESC, f.ord DESC))[1],
           (array_agg(f.hint ORDER BY f.at DESC, f.submission_id DESC, f.ord DESC))[1],
           max(f.at)
    FROM (
        SELECT s.session_id, s.verdict, s.quest_id, s.id AS submission_id,
               COALESCE(s.decided_at, s.created_at) AS at, e.ord,
               COALESCE(e.value ->> 'check', '') AS check_name,
               COALESCE(e.value ->> 'field', '') AS field,
               COALESCE(e.value ->> 'expected', '') AS expected,
               COALESCE(e.value ->> 'actual', '') AS actual,
               COALESCE(e.value ->> 'hint', '') AS hint
        FROM submissions s
        CROSS JOIN LATERAL json_array_elements(
            CASE WHEN json_typeof(s.facts) = 'array' THEN s.facts ELSE '[]' END)
            WITH ORDINALITY AS e (value, ord)
        WHERE s.id = ANY (ids) AND s.verdict IN ('FAIL', 'REVIEW') AND json_typeof(e.value) = 'object'
    ) f
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (session_id, check_name, field) DO UPDATE SET
        fails = c.fails + excluded.fails,
        reviews = c.reviews + excluded.reviews,
        quest_id = excluded.quest_id, submission_id = excluded.submission_id,
        expected = excluded.expected, actual = excluded.actual, hint = excluded.hint,
        last_at = excluded.last_at;
END $$;

CREATE FUNCTION submissions_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids UUID[] := ARRAY(SELECT id FROM new_rows);
BEGIN
    INSERT INTO session_counts AS c (session_id, bucket, slot, n)
    SELECT session_id, 'submissions', (txid_current() % 16)::smallint, count(*)
    FROM new_rows GROUP BY 1 ORDER BY 1
    ON CONFLICT (session_id, bucket, slot) DO UPDATE SET n = c.n + excluded.n;
    PERFORM console_agents_counted(ids, true);
    IF EXISTS (SELECT 1 FROM new_rows WHERE verdict IN ('FAIL', 'REVIEW')) THEN
        PERFORM console_facts_counted(ids);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER submissions_inserted AFTER INSERT ON submissions
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION submissions_inserted();

-- Submissions are append-only: a verdict is written once, and nothing else
-- changes, what the submission was sent as least of all.
CREATE FUNCTION submissions_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    decided UUID[];
BEGIN
    PERFORM ratchet_refused('submissions are append-only')
    FROM old_rows o LEFT JOIN new_rows n ON n.id = o.id
    WHERE n.id IS NULL OR o.verdict <> 'PENDING' OR n.result::text <> o.result::text
       OR n.lease_id <> o.lease_id OR n.quest_id <> o.quest_id
       OR n.idempotency_token IS DISTINCT FROM o.idempotency_token
       OR n.idempotency_key IS DISTINCT FROM o.idempotency_key
       OR n.repeats IS DISTINCT FROM o.repeats
       OR n.result_hash <> o.result_hash OR n.agent <> o.agent;
    decided := ARRAY(SELECT n.id FROM old_rows o JOIN new_rows n ON n.id = o.id
                     WHERE n.verdict <> 'PENDING');
    IF cardinality(decided) > 0 THEN
        PERFORM console_agents_counted(decided, false);
        PERFORM console_facts_counted(decided);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER submissions_updated AFTER UPDATE ON submissions
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION submissions_updated();

-- Leases ------------------------------------------------------------------------------

-- A lease granted: its agent has its row, seen then, and one lease more.
CREATE FUNCTION leases_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO console_agent_stats AS a (session_id, agent, last_seen, leased)
    SELECT session_id, agent, max(granted_at), count(*)
    FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (session_id, agent) DO UPDATE SET
        last_seen = GREATEST(a.last_seen, excluded.last_seen),
        leased = a.leased + excluded.leased;
    RETURN NULL;
END $$;

CREATE TRIGGER leases_inserted AFTER INSERT ON leases
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leases_inserted();

-- A heartbeat (or the renewal after a FAIL) moves the expiry: the agent was
-- seen one lease time before the new expiry. A lease that ends was seen then
-- when it was released, and counts a lapse when it expired.
CREATE FUNCTION leases_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE console_agent_stats a SET
        last_seen = GREATEST(a.last_seen, m.seen),
        lapses = a.lapses + m.lapses
    FROM (
        SELECT n.session_id, n.agent,
               max(CASE WHEN n.ended_at IS NULL AND n.expires_at > o.expires_at
                        THEN n.expires_at - s.lease_seconds * interval '1 second'
                        WHEN o.end_reason IS NULL AND n.end_reason = 'released' THEN n.ended_at END) AS seen,
               count(*) FILTER (WHERE o.end_reason IS NULL AND n.end_reason = 'expired') AS lapses
        FROM old_rows o JOIN new_rows n ON n.id = o.id JOIN sessions s ON s.id = n.session_id
        WHERE (n.ended_at IS NULL AND n.expires_at > o.expires_at)
           OR (o.end_reason IS NULL AND n.end_reason IN ('expired', 'released'))
        GROUP BY 1, 2
        ORDER BY 1, 2
    ) m
    WHERE a.session_id = m.session_id AND a.agent = m.agent;
    RETURN NULL;
END $$;

CREATE TRIGGER leases_updated AFTER UPDATE ON leases
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leases_updated();

-- Only history is pruned: a live lease holds its quest, and a lease that a
-- submission was made under stays with it (the foreign key refuses that too).
CREATE FUNCTION leases_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refused('a live lease is never deleted')
    FROM old_rows WHERE ended_at IS NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER leases_deleted AFTER DELETE ON leases
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION leases_deleted();

-- L2 jobs, re-check runs, pauses ------------------------------------------------------

CREATE FUNCTION l2_jobs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refused('an L2 job is answered once and never rewritten')
    FROM old_rows o LEFT JOIN new_rows n ON n.id = o.id
    WHERE n.id IS NULL OR o.status = 'answered' OR n.request::text <> o.request::text
       OR n.submission_id <> o.submission_id OR n.verifier <> o.verifier
       OR n.question <> o.question OR n.flag_on <> o.flag_on;
    RETURN NULL;
END $$;

CREATE TRIGGER l2_jobs_updated AFTER UPDATE ON l2_jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION l2_jobs_updated();

CREATE FUNCTION recheck_runs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refused('a re-check run finishes once and is never rewritten')
    FROM old_rows o LEFT JOIN new_rows n ON n.id = o.id
    WHERE n.id IS NULL OR o.finished_at IS NOT NULL OR n.session_id <> o.session_id
       OR n.total <> o.total OR n.started_at <> o.started_at
       OR n.started_by IS DISTINCT FROM o.started_by;
    RETURN NULL;
END $$;

CREATE TRIGGER recheck_runs_updated AFTER UPDATE ON recheck_runs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION recheck_runs_updated();

CREATE FUNCTION token_pauses_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratchet_refused('a pause is append-only but for its resume, written once')
    FROM old_rows o LEFT JOIN new_rows n ON n.id = o.id
    WHERE n.id IS NULL OR o.resumed_at IS NOT NULL
       OR n.session_id <> o.session_id OR n.token_id <> o.token_id
       OR n.agent <> o.agent OR n.reason <> o.reason OR n.figures <> o.figures
       OR n.through_seq <> o.through_seq OR n.created_at <> o.created_at;
    RETURN NULL;
END $$;

CREATE TRIGGER token_pauses_updated AFTER UPDATE ON token_pauses
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION token_pauses_updated();
