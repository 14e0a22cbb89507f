-- Running figures kept by triggers, so that status and the console's pages
-- cost the same for a thousand quests as for a million: the counts per
-- session (migrations/sqlite/0001), the L2 figures (0002) and the console's
-- agents, failing checks and throughput (0006).
--
-- The count rows of a session are shared by every write of that session. A
-- move locks its two buckets in name order, so two transactions moving quests
-- in opposite directions (leased -> checking, checking -> leased) wait for each
-- other instead of deadlocking.

-- Adds `delta` to one bucket of a session.
CREATE FUNCTION session_count_add(sid UUID, name TEXT, delta BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF delta > 0 THEN
        INSERT INTO session_counts (session_id, bucket, n) VALUES (sid, name, delta)
        ON CONFLICT (session_id, bucket) DO UPDATE SET n = session_counts.n + excluded.n;
    ELSE
        UPDATE session_counts SET n = n + delta WHERE session_id = sid AND bucket = name;
    END IF;
END $$;

CREATE FUNCTION quest_bucket(state TEXT, phase TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT state || COALESCE('/' || phase, '')
$$;

CREATE FUNCTION quests_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM session_count_add(NEW.session_id, quest_bucket(NEW.state, NEW.phase), 1);
    RETURN NULL;
END $$;

CREATE TRIGGER quests_count_insert AFTER INSERT ON quests
FOR EACH ROW EXECUTE FUNCTION quests_count_insert();

CREATE FUNCTION quests_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was TEXT := quest_bucket(OLD.state, OLD.phase);
    now_in TEXT := quest_bucket(NEW.state, NEW.phase);
BEGIN
    IF was = now_in THEN
        RETURN NULL;
    END IF;
    IF was < now_in THEN
        PERFORM session_count_add(OLD.session_id, was, -1);
        PERFORM session_count_add(NEW.session_id, now_in, 1);
    ELSE
        PERFORM session_count_add(NEW.session_id, now_in, 1);
        PERFORM session_count_add(OLD.session_id, was, -1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER quests_count_update AFTER UPDATE OF state, phase ON quests
FOR EACH ROW EXECUTE FUNCTION quests_count_update();

CREATE FUNCTION submissions_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM session_count_add(NEW.session_id, 'submissions', 1);
    RETURN NULL;
END $$;

CREATE TRIGGER submissions_count_insert AFTER INSERT ON submissions
FOR EACH ROW EXECUTE FUNCTION submissions_count_insert();

-- L2 ---------------------------------------------------------------------------------

CREATE FUNCTION l2_answers_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO l2_verifier_stats (session_id, verifier, model, answers, yes, no, flags, no_answers,
                                   latency_ms_sum, latency_ms_max)
    VALUES (NEW.session_id, NEW.verifier, NEW.model, (NEW.answer IS NOT NULL)::int,
            COALESCE(NEW.answer = 'yes', false)::int, COALESCE(NEW.answer = 'no', false)::int,
            NEW.flagged::int, (NEW.answer IS NULL)::int, NEW.latency_ms, NEW.latency_ms)
    ON CONFLICT (session_id, verifier) DO UPDATE SET
        model = excluded.model,
        answers = l2_verifier_stats.answers + excluded.answers,
        yes = l2_verifier_stats.yes + excluded.yes,
        no = l2_verifier_stats.no + excluded.no,
        flags = l2_verifier_stats.flags + excluded.flags,
        no_answers = l2_verifier_stats.no_answers + excluded.no_answers,
        latency_ms_sum = l2_verifier_stats.latency_ms_sum + excluded.latency_ms_sum,
        latency_ms_max = GREATEST(l2_verifier_stats.latency_ms_max, excluded.latency_ms_max);
    INSERT INTO l2_pair_stats (session_id, verifier_a, verifier_b, compared, agreed)
    SELECT NEW.session_id, LEAST(o.verifier, NEW.verifier), GREATEST(o.verifier, NEW.verifier), 1,
           (o.answer = NEW.answer)::int
    FROM l2_answers o
    WHERE o.submission_id = NEW.submission_id AND o.question_index = NEW.question_index
      AND o.verifier <> NEW.verifier AND o.answer IS NOT NULL AND NEW.answer IS NOT NULL
    ORDER BY 2, 3
    ON CONFLICT (session_id, verifier_a, verifier_b) DO UPDATE SET
        compared = l2_pair_stats.compared + 1,
        agreed = l2_pair_stats.agreed + excluded.agreed;
    RETURN NULL;
END $$;

CREATE TRIGGER l2_answers_count AFTER INSERT ON l2_answers
FOR EACH ROW EXECUTE FUNCTION l2_answers_count();

-- The console ------------------------------------------------------------------------

-- Revoking a token ends its browser sessions.
CREATE FUNCTION console_sessions_end_with_their_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL THEN
        UPDATE console_sessions SET ended_at = NEW.revoked_at, end_reason = 'revoked'
        WHERE token_id = NEW.id AND ended_at IS NULL;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER console_sessions_end_with_their_token AFTER UPDATE OF revoked_at ON tokens
FOR EACH ROW EXECUTE FUNCTION console_sessions_end_with_their_token();

-- Makes sure the agent has its row, seen at `seen`.
CREATE FUNCTION console_agent_seen(sid UUID, who TEXT, seen TIMESTAMPTZ) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO console_agent_stats (session_id, agent, last_seen) VALUES (sid, who, seen)
    ON CONFLICT (session_id, agent) DO UPDATE SET
        last_seen = GREATEST(console_agent_stats.last_seen, excluded.last_seen);
END $$;

CREATE FUNCTION console_agent_leased() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM console_agent_seen(NEW.session_id, NEW.agent, NEW.granted_at);
    UPDATE console_agent_stats SET leased = leased + 1
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
    RETURN NULL;
END $$;

CREATE TRIGGER console_agent_leased AFTER INSERT ON leases
FOR EACH ROW EXECUTE FUNCTION console_agent_leased();

-- A heartbeat (or the renewal after a FAIL) moves the expiry: the agent was
-- seen one lease time before the new expiry. A lease that ends was seen then
-- when it was released, and counts a lapse when it expired.
CREATE FUNCTION console_agent_lease_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ended_at IS NULL AND NEW.expires_at > OLD.expires_at THEN
        UPDATE console_agent_stats SET last_seen = GREATEST(last_seen, (
            SELECT NEW.expires_at - s.lease_seconds * interval '1 second'
            FROM sessions s WHERE s.id = NEW.session_id))
        WHERE session_id = NEW.session_id AND agent = NEW.agent;
    END IF;
    IF OLD.end_reason IS NULL AND NEW.end_reason IN ('expired', 'released') THEN
        UPDATE console_agent_stats SET
            lapses = lapses + (NEW.end_reason = 'expired')::int,
            last_seen = CASE WHEN NEW.end_reason = 'released'
                             THEN GREATEST(last_seen, NEW.ended_at) ELSE last_seen END
        WHERE session_id = NEW.session_id AND agent = NEW.agent;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER console_agent_lease_changed AFTER UPDATE OF expires_at, end_reason ON leases
FOR EACH ROW EXECUTE FUNCTION console_agent_lease_changed();

-- Counts a submission's verdict for its agent: when it is inserted decided (a
-- gate that needs no I/O decides in the request), or when a PENDING one is decided.
CREATE FUNCTION console_agent_verdict(s submissions) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE console_agent_stats SET
        pass = pass + (s.verdict = 'PASS')::int,
        fail = fail + (s.verdict = 'FAIL')::int,
        review = review + (s.verdict = 'REVIEW')::int,
        done = done + (s.verdict = 'FAIL' AND s.state_after = 'DONE')::int,
        pass_first = pass_first + (s.verdict = 'PASS' AND NOT EXISTS (
            SELECT 1 FROM submissions e
            WHERE e.quest_id = s.quest_id AND e.agent = s.agent AND e.id <> s.id
              AND (e.created_at, e.id) < (s.created_at, s.id)))::int,
        tries_to_pass = tries_to_pass + CASE WHEN s.verdict = 'PASS' THEN (
            SELECT COUNT(*) FROM submissions e
            WHERE e.quest_id = s.quest_id AND e.agent = s.agent
              AND (e.created_at, e.id) <= (s.created_at, s.id))
            ELSE 0 END
    WHERE session_id = s.session_id AND agent = s.agent;
END $$;

-- The facts of a FAIL or REVIEW verdict, counted by check and field; the last
-- fact of a (check, field) is its example.
CREATE FUNCTION console_facts_count(s submissions) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO console_fact_counts (session_id, check_name, field, fails, reviews, quest_id,
                                     submission_id, expected, actual, hint, last_at)
    SELECT s.session_id, f.check_name, f.field,
           CASE WHEN s.verdict = 'FAIL' THEN f.n ELSE 0 END,
           CASE WHEN s.verdict = 'REVIEW' THEN f.n ELSE 0 END,
           s.quest_id, s.id, f.expected, f.actual, f.hint, COALESCE(s.decided_at, s.created_at)
    FROM (
        SELECT COALESCE(e.value ->> 'check', '') AS check_name, COALESCE(e.value ->> 'field', '') AS field,
               COUNT(*) AS n,
               (array_agg(COALESCE(e.value ->> 'expected', '') ORDER BY e.ord DESC))[1] AS expected,
               (array_agg(COALESCE(e.value ->> 'actual', '') ORDER BY e.ord DESC))[1] AS actual,
               (array_agg(COALESCE(e.value ->> 'hint', '') ORDER BY e.ord DESC))[1] AS hint
        FROM json_array_elements(CASE WHEN json_typeof(s.facts) = 'array' THEN s.facts ELSE '[]' END)
             WITH ORDINALITY AS e (value, ord)
        WHERE json_typeof(e.value) = 'object'
        GROUP BY 1, 2
        ORDER BY 1, 2
    ) f
    ON CONFLICT (session_id, check_name, field) DO UPDATE SET
        fails = console_fact_counts.fails + excluded.fails,
        reviews = console_fact_counts.reviews + excluded.reviews,
        quest_id = excluded.quest_id, submission_id = excluded.submission_id,
        expected = excluded.expected, actual = excluded.actual, hint = excluded.hint,
        last_at = excluded.last_at;
END $$;

CREATE FUNCTION console_submission_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM console_agent_seen(NEW.session_id, NEW.agent, NEW.created_at);
    UPDATE console_agent_stats SET submissions = submissions + 1
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
    IF NEW.verdict <> 'PENDING' THEN
        PERFORM console_agent_verdict(NEW);
    END IF;
    IF NEW.verdict IN ('FAIL', 'REVIEW') THEN
        PERFORM console_facts_count(NEW);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER console_submission_inserted AFTER INSERT ON submissions
FOR EACH ROW EXECUTE FUNCTION console_submission_inserted();

CREATE FUNCTION console_submission_decided() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.verdict = 'PENDING' AND NEW.verdict <> 'PENDING' THEN
        PERFORM console_agent_verdict(NEW);
        IF NEW.verdict IN ('FAIL', 'REVIEW') THEN
            PERFORM console_facts_count(NEW);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER console_submission_decided AFTER UPDATE OF verdict ON submissions
FOR EACH ROW EXECUTE FUNCTION console_submission_decided();

-- Quests that left TODO (by the gate, the AI verifiers or the lapse limit), per
-- minute of UTC. Every state change writes `updated_at`.
CREATE FUNCTION console_throughput_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'TODO' AND NEW.state <> 'TODO' THEN
        INSERT INTO console_throughput (session_id, minute, decided)
        VALUES (NEW.session_id, date_trunc('minute', NEW.updated_at, 'UTC'), 1)
        ON CONFLICT (session_id, minute) DO UPDATE SET decided = console_throughput.decided + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER console_throughput_counted AFTER UPDATE OF state ON quests
FOR EACH ROW EXECUTE FUNCTION console_throughput_counted();
