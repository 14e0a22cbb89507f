-- The web console: browser sessions, and running figures kept by triggers so
-- that a session's page costs the same for a thousand quests as for a million
-- (the agents table, the checks that fail most, throughput per minute).

-- A browser session, started by signing in with a token. The cookie holds a
-- random id; only its SHA-256 is stored, like a token's secret.
CREATE TABLE console_sessions (
    hash        TEXT PRIMARY KEY,          -- SHA-256 of the cookie's session id, hex
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    csrf        TEXT NOT NULL,             -- the per-session token every console form carries
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    ended_at    TEXT,
    end_reason  TEXT CHECK (end_reason IN ('signed_out', 'revoked')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
) WITHOUT ROWID;

CREATE INDEX console_sessions_live_by_token ON console_sessions (token_id) WHERE ended_at IS NULL;

-- Revoking a token ends its browser sessions (the lookup also refuses a revoked
-- token; this keeps the record true as well).
CREATE TRIGGER console_sessions_end_with_their_token
AFTER UPDATE OF revoked_at ON tokens
WHEN NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL
BEGIN
    UPDATE console_sessions SET ended_at = NEW.revoked_at, end_reason = 'revoked'
    WHERE token_id = NEW.id AND ended_at IS NULL;
END;

-- One row per agent (`<token id>/<agent name>`) of a session. `last_seen` is
-- written with strftime so that every source of it has one text form.
CREATE TABLE console_agent_stats (
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    agent         TEXT NOT NULL,
    leased        INTEGER NOT NULL DEFAULT 0,   -- leases granted
    submissions   INTEGER NOT NULL DEFAULT 0,
    pass          INTEGER NOT NULL DEFAULT 0,   -- gate verdicts
    pass_first    INTEGER NOT NULL DEFAULT 0,   -- PASS on its first submission to that quest
    fail          INTEGER NOT NULL DEFAULT 0,
    review        INTEGER NOT NULL DEFAULT 0,
    done          INTEGER NOT NULL DEFAULT 0,   -- its FAIL used the quest's last try
    lapses        INTEGER NOT NULL DEFAULT 0,   -- its leases that expired
    tries_to_pass INTEGER NOT NULL DEFAULT 0,   -- over its PASSes: its submissions to that quest up to the PASS
    last_seen     TEXT NOT NULL,
    PRIMARY KEY (session_id, agent)
) WITHOUT ROWID;

CREATE TRIGGER console_agent_leased
AFTER INSERT ON leases
BEGIN
    INSERT INTO console_agent_stats (session_id, agent, leased, last_seen)
    VALUES (NEW.session_id, NEW.agent, 1, strftime('%Y-%m-%dT%H:%M:%fZ', NEW.granted_at))
    ON CONFLICT (session_id, agent) DO UPDATE SET
        leased = leased + 1, last_seen = MAX(last_seen, excluded.last_seen);
END;

-- A heartbeat (or the renewal after a FAIL) moves the expiry: the agent was
-- seen one lease time before the new expiry.
CREATE TRIGGER console_agent_renewed
AFTER UPDATE OF expires_at ON leases
WHEN NEW.ended_at IS NULL AND NEW.expires_at > OLD.expires_at
BEGIN
    UPDATE console_agent_stats SET last_seen = MAX(last_seen, (
        SELECT strftime('%Y-%m-%dT%H:%M:%fZ', NEW.expires_at, '-' || s.lease_seconds || ' seconds')
        FROM sessions s WHERE s.id = NEW.session_id))
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
END;

CREATE TRIGGER console_agent_lease_ended
AFTER UPDATE OF end_reason ON leases
WHEN OLD.end_reason IS NULL AND NEW.end_reason IN ('expired', 'released')
BEGIN
    UPDATE console_agent_stats SET
        lapses = lapses + (NEW.end_reason = 'expired'),
        last_seen = CASE WHEN NEW.end_reason = 'released'
                         THEN MAX(last_seen, strftime('%Y-%m-%dT%H:%M:%fZ', NEW.ended_at))
                         ELSE last_seen END
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
END;

-- A submission is inserted PENDING (its gate runs later), or already decided
-- (a gate that needs no I/O decides in the request): count its verdict then.
CREATE TRIGGER console_agent_submitted
AFTER INSERT ON submissions
BEGIN
    INSERT INTO console_agent_stats (session_id, agent, submissions, last_seen)
    VALUES (NEW.session_id, NEW.agent, 1, strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at))
    ON CONFLICT (session_id, agent) DO UPDATE SET
        submissions = submissions + 1, last_seen = MAX(last_seen, excluded.last_seen);
END;

CREATE TRIGGER console_agent_decided_at_once
AFTER INSERT ON submissions
WHEN NEW.verdict <> 'PENDING'
BEGIN
    INSERT INTO console_agent_stats (session_id, agent, last_seen)
    VALUES (NEW.session_id, NEW.agent, strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at))
    ON CONFLICT (session_id, agent) DO NOTHING;
    UPDATE console_agent_stats SET
        pass = pass + (NEW.verdict = 'PASS'),
        fail = fail + (NEW.verdict = 'FAIL'),
        review = review + (NEW.verdict = 'REVIEW'),
        done = done + (NEW.verdict = 'FAIL' AND NEW.state_after = 'DONE'),
        pass_first = pass_first + (NEW.verdict = 'PASS' AND NOT EXISTS (
            SELECT 1 FROM submissions e
            WHERE e.quest_id = NEW.quest_id AND e.agent = NEW.agent AND e.id <> NEW.id
              AND (e.created_at < NEW.created_at OR (e.created_at = NEW.created_at AND e.id < NEW.id)))),
        tries_to_pass = tries_to_pass + CASE WHEN NEW.verdict = 'PASS' THEN (
            SELECT COUNT(*) FROM submissions e
            WHERE e.quest_id = NEW.quest_id AND e.agent = NEW.agent
              AND (e.created_at < NEW.created_at OR (e.created_at = NEW.created_at AND e.id <= NEW.id)))
            ELSE 0 END
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
END;

CREATE TRIGGER console_agent_decided
AFTER UPDATE OF verdict ON submissions
WHEN OLD.verdict = 'PENDING' AND NEW.verdict <> 'PENDING'
BEGIN
    UPDATE console_agent_stats SET
        pass = pass + (NEW.verdict = 'PASS'),
        fail = fail + (NEW.verdict = 'FAIL'),
        review = review + (NEW.verdict = 'REVIEW'),
        done = done + (NEW.verdict = 'FAIL' AND NEW.state_after = 'DONE'),
        pass_first = pass_first + (NEW.verdict = 'PASS' AND NOT EXISTS (
            SELECT 1 FROM submissions e
            WHERE e.quest_id = NEW.quest_id AND e.agent = NEW.agent AND e.id <> NEW.id
              AND (e.created_at < NEW.created_at OR (e.created_at = NEW.created_at AND e.id < NEW.id)))),
        tries_to_pass = tries_to_pass + CASE WHEN NEW.verdict = 'PASS' THEN (
            SELECT COUNT(*) FROM submissions e
            WHERE e.quest_id = NEW.quest_id AND e.agent = NEW.agent
              AND (e.created_at < NEW.created_at OR (e.created_at = NEW.created_at AND e.id <= NEW.id)))
            ELSE 0 END
    WHERE session_id = NEW.session_id AND agent = NEW.agent;
END;

-- The facts of FAIL and REVIEW verdicts, by check and field, with the latest
-- one kept as the example.
CREATE TABLE console_fact_counts (
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    check_name    TEXT NOT NULL,
    field         TEXT NOT NULL,
    fails         INTEGER NOT NULL DEFAULT 0,
    reviews       INTEGER NOT NULL DEFAULT 0,
    quest_id      TEXT NOT NULL,
    submission_id TEXT NOT NULL,
    expected      TEXT NOT NULL,
    actual        TEXT NOT NULL,
    hint          TEXT NOT NULL,
    last_at       TEXT NOT NULL,
    PRIMARY KEY (session_id, check_name, field)
) WITHOUT ROWID;

CREATE TRIGGER console_facts_counted
AFTER UPDATE OF verdict ON submissions
WHEN OLD.verdict = 'PENDING' AND NEW.verdict IN ('FAIL', 'REVIEW')
BEGIN
    INSERT INTO console_fact_counts (session_id, check_name, field, fails, reviews, quest_id,
                                     submission_id, expected, actual, hint, last_at)
    SELECT NEW.session_id, COALESCE(json_extract(f.value, '$.check'), ''),
           COALESCE(json_extract(f.value, '$.field'), ''),
           NEW.verdict = 'FAIL', NEW.verdict = 'REVIEW', NEW.quest_id, NEW.id,
           COALESCE(json_extract(f.value, '$.expected'), ''), COALESCE(json_extract(f.value, '$.actual'), ''),
           COALESCE(json_extract(f.value, '$.hint'), ''), COALESCE(NEW.decided_at, NEW.created_at)
    FROM json_each(NEW.facts) f WHERE json_type(f.value) = 'object'
    ON CONFLICT (session_id, check_name, field) DO UPDATE SET
        fails = fails + excluded.fails, reviews = reviews + excluded.reviews,
        quest_id = excluded.quest_id, submission_id = excluded.submission_id,
        expected = excluded.expected, actual = excluded.actual, hint = excluded.hint,
        last_at = excluded.last_at;
END;

CREATE TRIGGER console_facts_counted_at_once
AFTER INSERT ON submissions
WHEN NEW.verdict IN ('FAIL', 'REVIEW')
BEGIN
    INSERT INTO console_fact_counts (session_id, check_name, field, fails, reviews, quest_id,
                                     submission_id, expected, actual, hint, last_at)
    SELECT NEW.session_id, COALESCE(json_extract(f.value, '$.check'), ''),
           COALESCE(json_extract(f.value, '$.field'), ''),
           NEW.verdict = 'FAIL', NEW.verdict = 'REVIEW', NEW.quest_id, NEW.id,
           COALESCE(json_extract(f.value, '$.expected'), ''), COALESCE(json_extract(f.value, '$.actual'), ''),
           COALESCE(json_extract(f.value, '$.hint'), ''), COALESCE(NEW.decided_at, NEW.created_at)
    FROM json_each(NEW.facts) f WHERE json_type(f.value) = 'object'
    ON CONFLICT (session_id, check_name, field) DO UPDATE SET
        fails = fails + excluded.fails, reviews = reviews + excluded.reviews,
        quest_id = excluded.quest_id, submission_id = excluded.submission_id,
        expected = excluded.expected, actual = excluded.actual, hint = excluded.hint,
        last_at = excluded.last_at;
END;

-- Quests that left TODO (PASS, REVIEW or DONE, by the gate, the AI verifiers
-- or the lapse limit), per minute. Every state change writes `updated_at`.
CREATE TABLE console_throughput (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    minute      TEXT NOT NULL,             -- 'YYYY-MM-DDTHH:MM', UTC
    decided     INTEGER NOT NULL CHECK (decided >= 0),
    PRIMARY KEY (session_id, minute)
) WITHOUT ROWID;

CREATE TRIGGER console_throughput_counted
AFTER UPDATE OF state ON quests
WHEN OLD.state = 'TODO' AND NEW.state <> 'TODO'
BEGIN
    INSERT INTO console_throughput (session_id, minute, decided)
    VALUES (NEW.session_id, substr(NEW.updated_at, 1, 16), 1)
    ON CONFLICT (session_id, minute) DO UPDATE SET decided = decided + 1;
END;

-- The quest table filters by state and pages by upload order.
CREATE INDEX console_quests_by_state ON quests (session_id, state, row_index);

-- The figures of what happened before this migration.
INSERT INTO console_agent_stats (session_id, agent, leased, lapses, last_seen)
SELECT session_id, agent, COUNT(*), SUM(COALESCE(end_reason = 'expired', 0)),
       MAX(strftime('%Y-%m-%dT%H:%M:%fZ', granted_at))
FROM leases GROUP BY session_id, agent;

INSERT INTO console_agent_stats (session_id, agent, submissions, pass, pass_first, fail, review, done,
                                 tries_to_pass, last_seen)
SELECT s.session_id, s.agent, COUNT(*), SUM(s.verdict = 'PASS'),
       SUM(s.verdict = 'PASS' AND s.nth = 1), SUM(s.verdict = 'FAIL'), SUM(s.verdict = 'REVIEW'),
       SUM(s.verdict = 'FAIL' AND s.state_after = 'DONE'),
       SUM(CASE WHEN s.verdict = 'PASS' THEN s.nth ELSE 0 END),
       MAX(strftime('%Y-%m-%dT%H:%M:%fZ', s.created_at))
FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY quest_id, agent ORDER BY created_at, id) AS nth
      FROM submissions) s
WHERE true
GROUP BY s.session_id, s.agent
ON CONFLICT (session_id, agent) DO UPDATE SET
    submissions = excluded.submissions, pass = excluded.pass, pass_first = excluded.pass_first,
    fail = excluded.fail, review = excluded.review, done = excluded.done,
    tries_to_pass = excluded.tries_to_pass, last_seen = MAX(last_seen, excluded.last_seen);

INSERT INTO console_fact_counts (session_id, check_name, field, fails, reviews, quest_id,
                                 submission_id, expected, actual, hint, last_at)
SELECT s.session_id, COALESCE(json_extract(f.value, '$.check'), ''),
       COALESCE(json_extract(f.value, '$.field'), ''),
       s.verdict = 'FAIL', s.verdict = 'REVIEW', s.quest_id, s.id,
       COALESCE(json_extract(f.value, '$.expected'), ''), COALESCE(json_extract(f.value, '$.actual'), ''),
       COALESCE(json_extract(f.value, '$.hint'), ''), COALESCE(s.decided_at, s.created_at)
FROM (SELECT * FROM submissions WHERE verdict IN ('FAIL', 'REVIEW') ORDER BY created_at, id) s,
     json_each(s.facts) f
WHERE json_type(f.value) = 'object'
ON CONFLICT (session_id, check_name, field) DO UPDATE SET
    fails = fails + excluded.fails, reviews = reviews + excluded.reviews,
    quest_id = excluded.quest_id, submission_id = excluded.submission_id,
    expected = excluded.expected, actual = excluded.actual, hint = excluded.hint,
    last_at = excluded.last_at;

-- Decision times before this migration are not kept; a terminal quest's last
-- change is the closest record of it.
INSERT INTO console_throughput (session_id, minute, decided)
SELECT session_id, substr(updated_at, 1, 16), COUNT(*) FROM quests
WHERE state <> 'TODO' GROUP BY session_id, substr(updated_at, 1, 16);
