-- The quest service's schema on PostgreSQL: the tables and indexes that
-- migrations/sqlite/0001..0007 build, as they stand after the last of them,
-- in native types (UUID ids, TIMESTAMPTZ times, BYTEA files). JSON is `json`,
-- not `jsonb`: the text is kept as written, so an object's keys keep their
-- order (result fields become export columns in first-seen order).

CREATE TABLE tokens (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'agent', 'reviewer', 'viewer')),
    -- SHA-256 of the bearer secret, hex. The secret itself is never stored.
    hash        TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);

-- Token names are unique among live tokens: reviewers are known by them.
CREATE UNIQUE INDEX tokens_live_name ON tokens (name) WHERE revoked_at IS NULL;
-- Every request looks its token up by a prefix of the digest, then compares
-- whole digests in constant time.
CREATE INDEX tokens_hash_prefix ON tokens (left(hash, 8)) WHERE revoked_at IS NULL;

CREATE TABLE sessions (
    id            UUID PRIMARY KEY,
    name          TEXT NOT NULL,
    key_column    TEXT NOT NULL,
    gate_kind     TEXT NOT NULL,
    config        JSON NOT NULL,           -- the full session config as uploaded
    columns       JSON NOT NULL,           -- the original column names, in order
    source_name   TEXT NOT NULL,
    source_type   TEXT NOT NULL,           -- media type of the uploaded bytes
    total         BIGINT NOT NULL CHECK (total >= 0),
    max_tries     INTEGER NOT NULL CHECK (max_tries >= 1),
    max_lapses    INTEGER NOT NULL CHECK (max_lapses >= 1),
    lease_seconds INTEGER NOT NULL CHECK (lease_seconds BETWEEN 1 AND 86400),
    created_by    TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL
);

-- The uploaded file, in pieces of 1 MiB, read and sent one at a time.
CREATE TABLE session_source_chunks (
    session_id  UUID NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    bytes       BYTEA NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE quests (
    id            UUID PRIMARY KEY,
    session_id    UUID NOT NULL REFERENCES sessions (id),
    row_index     BIGINT NOT NULL,         -- 0-based position in the upload
    key           TEXT NOT NULL CHECK (key <> ''),
    input         JSON NOT NULL,           -- the original row (an object)
    state         TEXT NOT NULL DEFAULT 'TODO' CHECK (state IN ('TODO', 'PASS', 'REVIEW', 'DONE')),
    phase         TEXT CHECK (phase IN ('open', 'leased', 'checking', 'verifying')),
    tries         INTEGER NOT NULL DEFAULT 0 CHECK (tries >= 0),
    lapses        INTEGER NOT NULL DEFAULT 0 CHECK (lapses >= 0),
    lease_id      UUID,                    -- the live lease, while phase is leased or checking
    last_facts    JSON NOT NULL DEFAULT '[]',
    result        JSON,                    -- the result under review or accepted
    submission_id UUID,                    -- the submission that decided the quest
    receipt       TEXT,
    decided_by    TEXT,                    -- gate | reviewer:<name> | limit
    review_claimed_by TEXT,
    review_claim_expires_at TIMESTAMPTZ,
    -- The last two FAILs carried the same facts (a doom loop).
    repeated_failure BOOLEAN NOT NULL DEFAULT false,
    updated_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (session_id, row_index),
    -- A phase belongs to TODO only, and a live lease to the leased and checking phases only.
    CHECK ((state = 'TODO') = (phase IS NOT NULL)),
    CHECK (COALESCE(phase IN ('leased', 'checking'), false) = (lease_id IS NOT NULL))
);

-- The claim reads this partial index: the open quests of one session, in upload order.
CREATE INDEX quests_open ON quests (session_id, row_index) WHERE phase = 'open';
CREATE INDEX quests_session_state ON quests (session_id, state, phase);
CREATE INDEX quests_review ON quests (session_id, updated_at) WHERE state = 'REVIEW';
CREATE INDEX console_quests_by_state ON quests (session_id, state, row_index);
-- Which other quests of a session hold the same contact address (the email gate).
CREATE INDEX quests_result_email ON quests (session_id, lower(result ->> 'email'));

CREATE TABLE leases (
    id          UUID PRIMARY KEY,
    quest_id    UUID NOT NULL REFERENCES quests (id),
    session_id  UUID NOT NULL REFERENCES sessions (id),
    agent       TEXT NOT NULL,             -- <token id>/<agent name>
    granted_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ,
    end_reason  TEXT CHECK (end_reason IN ('released', 'expired', 'decided')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);

-- One live lease per agent and session, also across replicas: two concurrent
-- claims of one agent cannot both commit.
CREATE UNIQUE INDEX leases_live_by_agent ON leases (session_id, agent) WHERE ended_at IS NULL;
CREATE INDEX leases_live_by_expiry ON leases (session_id, expires_at) WHERE ended_at IS NULL;

CREATE TABLE submissions (
    id           UUID PRIMARY KEY,
    quest_id     UUID NOT NULL REFERENCES quests (id),
    session_id   UUID NOT NULL REFERENCES sessions (id),
    lease_id     UUID NOT NULL REFERENCES leases (id),
    agent        TEXT NOT NULL,
    result       JSON NOT NULL,
    result_hash  TEXT NOT NULL,            -- SHA-256 of the canonical result: spots identical retries
    verdict      TEXT NOT NULL DEFAULT 'PENDING' CHECK (verdict IN ('PENDING', 'PASS', 'FAIL', 'REVIEW')),
    facts        JSON NOT NULL DEFAULT '[]',
    evidence     JSON NOT NULL DEFAULT '[]',
    gate         TEXT,
    gate_version TEXT,
    receipt      TEXT,
    state_after  TEXT CHECK (state_after IN ('TODO', 'PASS', 'REVIEW', 'DONE')),
    tries_after  INTEGER,
    created_at   TIMESTAMPTZ NOT NULL,
    decided_at   TIMESTAMPTZ
);

CREATE INDEX submissions_quest ON submissions (quest_id, created_at, id);
CREATE INDEX submissions_lease_hash ON submissions (lease_id, result_hash);
CREATE INDEX submissions_pending ON submissions (created_at) WHERE verdict = 'PENDING';
CREATE INDEX submissions_pending_by_session ON submissions (session_id) WHERE verdict = 'PENDING';
CREATE INDEX submissions_session_decided ON submissions (session_id, decided_at);

CREATE TABLE review_decisions (
    id          UUID PRIMARY KEY,
    quest_id    UUID NOT NULL REFERENCES quests (id),
    reviewer    TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    note        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE INDEX review_decisions_quest ON review_decisions (quest_id, created_at);

-- The verification cascade (L2) --------------------------------------------------

-- One job per (accepted submission, verifier, question), written in the same
-- transaction that moves the quest to `verifying`. `request` is exactly what the
-- verifier sees (contract and artifact), so what it was shown is on record.
CREATE TABLE l2_jobs (
    id             UUID PRIMARY KEY,
    submission_id  UUID NOT NULL REFERENCES submissions (id),
    quest_id       UUID NOT NULL REFERENCES quests (id),
    session_id     UUID NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    question_index INTEGER NOT NULL CHECK (question_index >= 0),
    question       TEXT NOT NULL,
    flag_on        TEXT NOT NULL CHECK (flag_on IN ('yes', 'no')),
    request        JSON NOT NULL,              -- VerifierRequest
    status         TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'answered')),
    created_at     TIMESTAMPTZ NOT NULL,
    answered_at    TIMESTAMPTZ,
    UNIQUE (submission_id, verifier, question_index)
);

CREATE INDEX l2_jobs_queued ON l2_jobs (created_at) WHERE status = 'queued';
CREATE INDEX l2_jobs_submission ON l2_jobs (submission_id, status);

-- One answer per job. `answer` NULL is no answer (timeout, error, or a reply that
-- was not a clean YES or NO); `detail` says why, or carries the reason given.
CREATE TABLE l2_answers (
    job_id         UUID PRIMARY KEY REFERENCES l2_jobs (id),
    submission_id  UUID NOT NULL REFERENCES submissions (id),
    quest_id       UUID NOT NULL REFERENCES quests (id),
    session_id     UUID NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    model          TEXT NOT NULL,
    question_index INTEGER NOT NULL,
    question       TEXT NOT NULL,
    flag_on        TEXT NOT NULL CHECK (flag_on IN ('yes', 'no')),
    raw_reply      TEXT,
    answer         TEXT CHECK (answer IN ('yes', 'no')),
    detail         TEXT NOT NULL,
    flagged        BOOLEAN NOT NULL,
    attempts       INTEGER NOT NULL CHECK (attempts >= 0),
    latency_ms     BIGINT NOT NULL CHECK (latency_ms >= 0),
    created_at     TIMESTAMPTZ NOT NULL,
    CHECK (NOT flagged OR answer = flag_on)
);

CREATE INDEX l2_answers_quest ON l2_answers (quest_id, question_index, verifier);
CREATE INDEX l2_answers_submission ON l2_answers (submission_id, question_index);

-- One row per finished verification; its only possible outcomes are PASS and REVIEW.
CREATE TABLE l2_decisions (
    submission_id  UUID PRIMARY KEY REFERENCES submissions (id),
    quest_id       UUID NOT NULL REFERENCES quests (id),
    session_id     UUID NOT NULL REFERENCES sessions (id),
    state_after    TEXT NOT NULL CHECK (state_after IN ('PASS', 'REVIEW')),
    facts          JSON NOT NULL,             -- the L2 facts the decision produced
    decided_at     TIMESTAMPTZ NOT NULL
);

CREATE INDEX l2_decisions_session ON l2_decisions (session_id, decided_at);

-- Running figures, kept by triggers (0003) -------------------------------------------

-- Buckets: `TODO/<phase>`, `PASS`, `REVIEW`, `DONE`, and `submissions`.
CREATE TABLE session_counts (
    session_id  UUID NOT NULL REFERENCES sessions (id),
    bucket      TEXT NOT NULL,
    n           BIGINT NOT NULL CHECK (n >= 0),
    PRIMARY KEY (session_id, bucket)
);

CREATE TABLE l2_verifier_stats (
    session_id     UUID NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    model          TEXT NOT NULL,
    answers        BIGINT NOT NULL DEFAULT 0,   -- valid answers
    yes            BIGINT NOT NULL DEFAULT 0,
    no             BIGINT NOT NULL DEFAULT 0,
    flags          BIGINT NOT NULL DEFAULT 0,
    no_answers     BIGINT NOT NULL DEFAULT 0,
    latency_ms_sum BIGINT NOT NULL DEFAULT 0,   -- over every call, answered or not
    latency_ms_max BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, verifier)
);

-- Agreement of two verifiers (verifier_a < verifier_b) on the same question of
-- the same submission, where both gave a valid answer.
CREATE TABLE l2_pair_stats (
    session_id  UUID NOT NULL REFERENCES sessions (id),
    verifier_a  TEXT NOT NULL,
    verifier_b  TEXT NOT NULL,
    compared    BIGINT NOT NULL DEFAULT 0,
    agreed      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, verifier_a, verifier_b),
    CHECK (verifier_a < verifier_b),
    CHECK (agreed <= compared)
);

-- The web console -----------------------------------------------------------------

-- A browser session, started by signing in with a token. The cookie holds a
-- random id; only its SHA-256 is stored, like a token's secret.
CREATE TABLE console_sessions (
    hash        TEXT PRIMARY KEY,          -- SHA-256 of the cookie's session id, hex
    token_id    UUID NOT NULL REFERENCES tokens (id),
    csrf        TEXT NOT NULL,             -- the per-session token every console form carries
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ,
    end_reason  TEXT CHECK (end_reason IN ('signed_out', 'revoked')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);

CREATE INDEX console_sessions_live_by_token ON console_sessions (token_id) WHERE ended_at IS NULL;
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- One row per agent (`<token id>/<agent name>`) of a session.
CREATE TABLE console_agent_stats (
    session_id    UUID NOT NULL REFERENCES sessions (id),
    agent         TEXT NOT NULL,
    leased        BIGINT NOT NULL DEFAULT 0,   -- leases granted
    submissions   BIGINT NOT NULL DEFAULT 0,
    pass          BIGINT NOT NULL DEFAULT 0,   -- gate verdicts
    pass_first    BIGINT NOT NULL DEFAULT 0,   -- PASS on its first submission to that quest
    fail          BIGINT NOT NULL DEFAULT 0,
    review        BIGINT NOT NULL DEFAULT 0,
    done          BIGINT NOT NULL DEFAULT 0,   -- its FAIL used the quest's last try
    lapses        BIGINT NOT NULL DEFAULT 0,   -- its leases that expired
    tries_to_pass BIGINT NOT NULL DEFAULT 0,   -- over its PASSes: its submissions to that quest up to the PASS
    last_seen     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, agent)
);

-- The facts of FAIL and REVIEW verdicts, by check and field, with the latest
-- one kept as the example.
CREATE TABLE console_fact_counts (
    session_id    UUID NOT NULL REFERENCES sessions (id),
    check_name    TEXT NOT NULL,
    field         TEXT NOT NULL,
    fails         BIGINT NOT NULL DEFAULT 0,
    reviews       BIGINT NOT NULL DEFAULT 0,
    quest_id      UUID NOT NULL,
    submission_id UUID NOT NULL,
    expected      TEXT NOT NULL,
    actual        TEXT NOT NULL,
    hint          TEXT NOT NULL,
    last_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, check_name, field)
);

-- Quests that left TODO, per minute (UTC).
CREATE TABLE console_throughput (
    session_id  UUID NOT NULL REFERENCES sessions (id),
    minute      TIMESTAMPTZ NOT NULL,
    decided     BIGINT NOT NULL CHECK (decided >= 0),
    PRIMARY KEY (session_id, minute)
);
