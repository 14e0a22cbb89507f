-- The core tables of the quest service, and the triggers that make the ratchet a
-- property of the database rather than of the application code above it.
-- Ids are hyphenated UUID text; times are RFC 3339 text in UTC; JSON is text.

CREATE TABLE tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'agent', 'reviewer', 'viewer')),
    -- SHA-256 of the bearer secret, hex. The secret itself is never stored.
    hash        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);

CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    key_column   TEXT NOT NULL,
    gate_kind    TEXT NOT NULL,
    config       TEXT NOT NULL,            -- the full session config as uploaded (JSON)
    columns      TEXT NOT NULL,            -- the original column names, in order (JSON array)
    source_name  TEXT NOT NULL,
    source_type  TEXT NOT NULL,            -- media type of the uploaded bytes
    source       BLOB NOT NULL,            -- the uploaded file, byte for byte
    total        INTEGER NOT NULL CHECK (total >= 0),
    max_tries    INTEGER NOT NULL CHECK (max_tries >= 1),
    max_lapses   INTEGER NOT NULL CHECK (max_lapses >= 1),
    lease_seconds INTEGER NOT NULL CHECK (lease_seconds BETWEEN 1 AND 86400),
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL
);

CREATE TABLE quests (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    row_index    INTEGER NOT NULL,         -- 0-based position in the upload
    key          TEXT NOT NULL CHECK (key <> ''),
    input        TEXT NOT NULL,            -- the original row (JSON object)
    state        TEXT NOT NULL DEFAULT 'TODO' CHECK (state IN ('TODO', 'PASS', 'REVIEW', 'DONE')),
    phase        TEXT CHECK (phase IN ('open', 'leased', 'checking', 'verifying')),
    tries        INTEGER NOT NULL DEFAULT 0 CHECK (tries >= 0),
    lapses       INTEGER NOT NULL DEFAULT 0 CHECK (lapses >= 0),
    lease_id     TEXT,                     -- the live lease, while phase is leased or checking
    last_facts   TEXT NOT NULL DEFAULT '[]',
    result       TEXT,                     -- the result under review or accepted (JSON)
    submission_id TEXT,                    -- the submission that decided the quest
    receipt      TEXT,
    decided_by   TEXT,                     -- gate | reviewer:<name> | limit
    review_claimed_by TEXT,
    review_claim_expires_at TEXT,
    updated_at   TEXT NOT NULL,
    UNIQUE (session_id, row_index),
    -- A phase belongs to TODO only, and a live lease to the leased and checking phases only.
    CHECK ((state = 'TODO') = (phase IS NOT NULL)),
    CHECK (COALESCE(phase IN ('leased', 'checking'), 0) = (lease_id IS NOT NULL))
);

-- The claim reads this partial index: the open quests of one session, in upload order.
CREATE INDEX quests_open ON quests (session_id, row_index) WHERE phase = 'open';
CREATE INDEX quests_session_state ON quests (session_id, state, phase);
CREATE INDEX quests_review ON quests (session_id, updated_at) WHERE state = 'REVIEW';

CREATE TABLE leases (
    id          TEXT PRIMARY KEY,
    quest_id    TEXT NOT NULL REFERENCES quests (id),
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    agent       TEXT NOT NULL,             -- <token id>/<agent name>
    granted_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    ended_at    TEXT,
    end_reason  TEXT CHECK (end_reason IN ('released', 'expired', 'decided'))
);

CREATE INDEX leases_live_by_agent ON leases (session_id, agent) WHERE ended_at IS NULL;
CREATE INDEX leases_live_by_expiry ON leases (expires_at) WHERE ended_at IS NULL;

CREATE TABLE submissions (
    id          TEXT PRIMARY KEY,
    quest_id    TEXT NOT NULL REFERENCES quests (id),
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    lease_id    TEXT NOT NULL REFERENCES leases (id),
    agent       TEXT NOT NULL,
    result      TEXT NOT NULL,
    result_hash TEXT NOT NULL,             -- SHA-256 of the canonical result: spots identical retries
    verdict     TEXT NOT NULL DEFAULT 'PENDING' CHECK (verdict IN ('PENDING', 'PASS', 'FAIL', 'REVIEW')),
    facts       TEXT NOT NULL DEFAULT '[]',
    evidence    TEXT NOT NULL DEFAULT '[]',
    gate        TEXT,
    gate_version TEXT,
    receipt     TEXT,
    state_after TEXT CHECK (state_after IN ('TODO', 'PASS', 'REVIEW', 'DONE')),
    tries_after INTEGER,
    created_at  TEXT NOT NULL,
    decided_at  TEXT
);

CREATE INDEX submissions_quest ON submissions (quest_id, created_at, id);
CREATE INDEX submissions_lease_hash ON submissions (lease_id, result_hash);
CREATE INDEX submissions_pending ON submissions (created_at) WHERE verdict = 'PENDING';
CREATE INDEX submissions_session_decided ON submissions (session_id, decided_at);

CREATE TABLE review_decisions (
    id          TEXT PRIMARY KEY,
    quest_id    TEXT NOT NULL REFERENCES quests (id),
    reviewer    TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    note        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- The ratchet, enforced below the application -----------------------------------

-- Nothing leaves PASS or DONE; REVIEW may only become PASS or DONE.
CREATE TRIGGER quests_terminal_is_final
BEFORE UPDATE OF state ON quests
WHEN (OLD.state IN ('PASS', 'DONE') AND NEW.state <> OLD.state)
  OR (OLD.state = 'REVIEW' AND NEW.state NOT IN ('REVIEW', 'PASS', 'DONE'))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest in PASS, REVIEW or DONE cannot return to TODO or change its verdict');
END;

-- A terminal quest's accepted result, receipt and tries are frozen.
CREATE TRIGGER quests_decision_is_frozen
BEFORE UPDATE ON quests
WHEN OLD.state IN ('PASS', 'DONE')
  AND (NEW.result IS NOT OLD.result OR NEW.receipt IS NOT OLD.receipt
       OR NEW.submission_id IS NOT OLD.submission_id OR NEW.decided_by IS NOT OLD.decided_by
       OR NEW.tries <> OLD.tries OR NEW.input <> OLD.input)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a decided quest is frozen');
END;

CREATE TRIGGER quests_tries_never_decrease
BEFORE UPDATE OF tries ON quests
WHEN NEW.tries < OLD.tries
BEGIN
    SELECT RAISE(ABORT, 'ratchet: tries never decrease');
END;

CREATE TRIGGER quests_are_never_deleted
BEFORE DELETE ON quests
BEGIN
    SELECT RAISE(ABORT, 'ratchet: quests are never deleted');
END;

-- Submissions are append-only: a verdict is written once, and nothing else changes.
CREATE TRIGGER submissions_verdict_written_once
BEFORE UPDATE ON submissions
WHEN OLD.verdict <> 'PENDING'
  OR NEW.result <> OLD.result OR NEW.lease_id <> OLD.lease_id OR NEW.quest_id <> OLD.quest_id
BEGIN
    SELECT RAISE(ABORT, 'ratchet: submissions are append-only');
END;

CREATE TRIGGER submissions_are_never_deleted
BEFORE DELETE ON submissions
BEGIN
    SELECT RAISE(ABORT, 'ratchet: submissions are never deleted');
END;

CREATE TRIGGER review_decisions_are_never_changed
BEFORE UPDATE ON review_decisions
BEGIN
    SELECT RAISE(ABORT, 'ratchet: review decisions are append-only');
END;

-- Running counts per session, kept by triggers, so that status and `remaining`
-- cost the same for a thousand quests as for a million. Buckets: `TODO/<phase>`,
-- `PASS`, `REVIEW`, `DONE`, and `submissions`.
CREATE TABLE session_counts (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    bucket      TEXT NOT NULL,
    n           INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (session_id, bucket)
) WITHOUT ROWID;

CREATE TRIGGER quests_count_insert
AFTER INSERT ON quests
BEGIN
    INSERT INTO session_counts (session_id, bucket, n)
    VALUES (NEW.session_id, NEW.state || COALESCE('/' || NEW.phase, ''), 1)
    ON CONFLICT (session_id, bucket) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER quests_count_update
AFTER UPDATE OF state, phase ON quests
WHEN NEW.state IS NOT OLD.state OR NEW.phase IS NOT OLD.phase
BEGIN
    UPDATE session_counts SET n = n - 1
    WHERE session_id = OLD.session_id AND bucket = OLD.state || COALESCE('/' || OLD.phase, '');
    INSERT INTO session_counts (session_id, bucket, n)
    VALUES (NEW.session_id, NEW.state || COALESCE('/' || NEW.phase, ''), 1)
    ON CONFLICT (session_id, bucket) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER submissions_count_insert
AFTER INSERT ON submissions
BEGIN
    INSERT INTO session_counts (session_id, bucket, n)
    VALUES (NEW.session_id, 'submissions', 1)
    ON CONFLICT (session_id, bucket) DO UPDATE SET n = n + 1;
END;

-- REPLACE deletes the old row without firing delete triggers: refuse inserting an
-- id that exists, so `INSERT OR REPLACE` cannot rewrite a decided quest or verdict.
CREATE TRIGGER quests_ids_are_never_reused
BEFORE INSERT ON quests
WHEN EXISTS (SELECT 1 FROM quests WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest id is never reused or replaced');
END;

CREATE TRIGGER submissions_ids_are_never_reused
BEFORE INSERT ON submissions
WHEN EXISTS (SELECT 1 FROM submissions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a submission id is never reused or replaced');
END;

CREATE TRIGGER review_decisions_ids_are_never_reused
BEFORE INSERT ON review_decisions
WHEN EXISTS (SELECT 1 FROM review_decisions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a review decision is never replaced');
END;

CREATE TRIGGER review_decisions_are_never_deleted
BEFORE DELETE ON review_decisions
BEGIN
    SELECT RAISE(ABORT, 'ratchet: review decisions are never deleted');
END;

-- A quest under review keeps the result a person is deciding on.
CREATE TRIGGER quests_review_is_frozen
BEFORE UPDATE ON quests
WHEN OLD.state = 'REVIEW'
  AND (NEW.result IS NOT OLD.result OR NEW.submission_id IS NOT OLD.submission_id
       OR NEW.tries <> OLD.tries OR NEW.input <> OLD.input)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest in REVIEW keeps the result under review');
END;

CREATE TRIGGER quests_lapses_never_decrease
BEFORE UPDATE OF lapses ON quests
WHEN NEW.lapses < OLD.lapses
BEGIN
    SELECT RAISE(ABORT, 'ratchet: lapses never decrease');
END;

-- The phase moves of a TODO quest (NULL is a terminal state):
--   open -> leased; leased -> open | checking | NULL (lapse cap);
--   checking -> leased (FAIL) | verifying | NULL; verifying -> NULL.
CREATE TRIGGER quests_phase_moves
BEFORE UPDATE OF phase ON quests
WHEN NEW.phase IS NOT OLD.phase
  AND NOT ((OLD.phase = 'open' AND NEW.phase = 'leased')
        OR (OLD.phase = 'leased' AND (NEW.phase IN ('open', 'checking') OR NEW.phase IS NULL))
        OR (OLD.phase = 'checking' AND (NEW.phase IN ('leased', 'verifying') OR NEW.phase IS NULL))
        OR (OLD.phase = 'verifying' AND NEW.phase IS NULL))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: illegal phase move');
END;

-- Token names are unique among live tokens: reviewers are known by them.
CREATE UNIQUE INDEX tokens_live_name ON tokens (name) WHERE revoked_at IS NULL;
