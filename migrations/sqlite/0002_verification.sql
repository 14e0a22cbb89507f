-- The verification cascade (L2): durable jobs for the AI verifiers, their
-- append-only answers, running figures per verifier and per pair of verifiers,
-- and triggers that keep L2 from doing anything but raising doubt.

-- One job per (accepted submission, verifier, question), written in the same
-- transaction that moves the quest to `verifying`. `request` is exactly what the
-- verifier sees (contract and artifact), so what it was shown is on record.
CREATE TABLE l2_jobs (
    id             TEXT PRIMARY KEY,
    submission_id  TEXT NOT NULL REFERENCES submissions (id),
    quest_id       TEXT NOT NULL REFERENCES quests (id),
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    question_index INTEGER NOT NULL CHECK (question_index >= 0),
    question       TEXT NOT NULL,
    flag_on        TEXT NOT NULL CHECK (flag_on IN ('yes', 'no')),
    request        TEXT NOT NULL,              -- VerifierRequest (JSON)
    status         TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'answered')),
    created_at     TEXT NOT NULL,
    answered_at    TEXT,
    UNIQUE (submission_id, verifier, question_index)
);

CREATE INDEX l2_jobs_queued ON l2_jobs (created_at) WHERE status = 'queued';
CREATE INDEX l2_jobs_submission ON l2_jobs (submission_id, status);

-- One answer per job. `answer` NULL is no answer (timeout, error, or a reply that
-- was not a clean YES or NO); `detail` says why, or carries the reason given.
CREATE TABLE l2_answers (
    job_id         TEXT PRIMARY KEY REFERENCES l2_jobs (id),
    submission_id  TEXT NOT NULL REFERENCES submissions (id),
    quest_id       TEXT NOT NULL REFERENCES quests (id),
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    model          TEXT NOT NULL,
    question_index INTEGER NOT NULL,
    question       TEXT NOT NULL,
    flag_on        TEXT NOT NULL CHECK (flag_on IN ('yes', 'no')),
    raw_reply      TEXT,
    answer         TEXT CHECK (answer IN ('yes', 'no')),
    detail         TEXT NOT NULL,
    flagged        INTEGER NOT NULL CHECK (flagged IN (0, 1)),
    attempts       INTEGER NOT NULL CHECK (attempts >= 0),
    latency_ms     INTEGER NOT NULL CHECK (latency_ms >= 0),
    created_at     TEXT NOT NULL,
    CHECK (flagged = 0 OR answer = flag_on)
);

CREATE INDEX l2_answers_quest ON l2_answers (quest_id, question_index, verifier);
CREATE INDEX l2_answers_submission ON l2_answers (submission_id, question_index);

-- One row per finished verification: what L2 decided, and when. Its only
-- possible outcomes are PASS and REVIEW. Status counts these as finished quests.
CREATE TABLE l2_decisions (
    submission_id  TEXT PRIMARY KEY REFERENCES submissions (id),
    quest_id       TEXT NOT NULL REFERENCES quests (id),
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    state_after    TEXT NOT NULL CHECK (state_after IN ('PASS', 'REVIEW')),
    facts          TEXT NOT NULL,             -- the L2 facts the decision produced (JSON)
    decided_at     TEXT NOT NULL
);

CREATE INDEX l2_decisions_session ON l2_decisions (session_id, decided_at);

-- Running figures, kept by a trigger so that status costs the same however many
-- answers a session has.
CREATE TABLE l2_verifier_stats (
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    model          TEXT NOT NULL,
    answers        INTEGER NOT NULL DEFAULT 0,   -- valid answers
    yes            INTEGER NOT NULL DEFAULT 0,
    no             INTEGER NOT NULL DEFAULT 0,
    flags          INTEGER NOT NULL DEFAULT 0,
    no_answers     INTEGER NOT NULL DEFAULT 0,
    latency_ms_sum INTEGER NOT NULL DEFAULT 0,   -- over every call, answered or not
    latency_ms_max INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, verifier)
) WITHOUT ROWID;

-- Agreement of two verifiers (verifier_a < verifier_b) on the same question of
-- the same submission, where both gave a valid answer.
CREATE TABLE l2_pair_stats (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    verifier_a  TEXT NOT NULL,
    verifier_b  TEXT NOT NULL,
    compared    INTEGER NOT NULL DEFAULT 0,
    agreed      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, verifier_a, verifier_b),
    CHECK (verifier_a < verifier_b),
    CHECK (agreed <= compared)
) WITHOUT ROWID;

CREATE TRIGGER l2_answers_count
AFTER INSERT ON l2_answers
BEGIN
    INSERT INTO l2_verifier_stats (session_id, verifier, model, answers, yes, no, flags, no_answers, latency_ms_sum, latency_ms_max)
    VALUES (NEW.session_id, NEW.verifier, NEW.model, NEW.answer IS NOT NULL,
            COALESCE(NEW.answer = 'yes', 0), COALESCE(NEW.answer = 'no', 0),
            NEW.flagged, NEW.answer IS NULL, NEW.latency_ms, NEW.latency_ms)
    ON CONFLICT (session_id, verifier) DO UPDATE SET
        model = excluded.model,
        answers = answers + excluded.answers,
        yes = yes + excluded.yes,
        no = no + excluded.no,
        flags = flags + excluded.flags,
        no_answers = no_answers + excluded.no_answers,
        latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum,
        latency_ms_max = MAX(latency_ms_max, excluded.latency_ms_max);
    INSERT INTO l2_pair_stats (session_id, verifier_a, verifier_b, compared, agreed)
    SELECT NEW.session_id, MIN(o.verifier, NEW.verifier), MAX(o.verifier, NEW.verifier), 1, o.answer = NEW.answer
    FROM l2_answers o
    WHERE o.submission_id = NEW.submission_id AND o.question_index = NEW.question_index
      AND o.verifier <> NEW.verifier AND o.answer IS NOT NULL AND NEW.answer IS NOT NULL
    ON CONFLICT (session_id, verifier_a, verifier_b) DO UPDATE SET
        compared = compared + 1,
        agreed = agreed + excluded.agreed;
END;

-- The ratchet, extended to L2 -----------------------------------------------------

-- A quest enters `verifying` only from `checking` (an L1 PASS), and leaves it only
-- for PASS or REVIEW: L2 can never FAIL a quest, reopen it, or end it in DONE.
CREATE TRIGGER quests_verifying_only_after_checking
BEFORE UPDATE OF phase ON quests
WHEN NEW.phase = 'verifying' AND OLD.phase IS NOT 'checking' AND OLD.phase IS NOT 'verifying'
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a quest is verified only after its gate passed it');
END;

CREATE TRIGGER quests_verifying_ends_in_pass_or_review
BEFORE UPDATE OF state, phase ON quests
WHEN OLD.phase = 'verifying'
  AND NOT (NEW.state IN ('PASS', 'REVIEW') OR (NEW.state = 'TODO' AND NEW.phase = 'verifying'))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: AI verifiers may only pass a quest on or send it to REVIEW');
END;

-- While verifiers look, and after, what they look at is frozen, and L2 never changes tries.
CREATE TRIGGER quests_verifying_is_frozen
BEFORE UPDATE ON quests
WHEN OLD.phase = 'verifying'
  AND (NEW.tries <> OLD.tries OR NEW.lapses <> OLD.lapses OR NEW.input <> OLD.input
       OR NEW.result IS NOT OLD.result OR NEW.submission_id IS NOT OLD.submission_id
       OR NEW.lease_id IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 never changes tries, the result or the lease of a quest');
END;

-- Answers are append-only; a job is answered once and never deleted.
CREATE TRIGGER l2_answers_are_never_changed
BEFORE UPDATE ON l2_answers
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 answers are append-only');
END;

CREATE TRIGGER l2_answers_are_never_deleted
BEFORE DELETE ON l2_answers
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 answers are append-only');
END;

CREATE TRIGGER l2_decisions_are_never_changed
BEFORE UPDATE ON l2_decisions
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 decisions are append-only');
END;

CREATE TRIGGER l2_decisions_are_never_deleted
BEFORE DELETE ON l2_decisions
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 decisions are append-only');
END;

CREATE TRIGGER l2_jobs_are_answered_once
BEFORE UPDATE ON l2_jobs
WHEN OLD.status = 'answered' OR NEW.request <> OLD.request OR NEW.submission_id <> OLD.submission_id
  OR NEW.verifier <> OLD.verifier OR NEW.question <> OLD.question OR NEW.flag_on <> OLD.flag_on
BEGIN
    SELECT RAISE(ABORT, 'ratchet: an L2 job is answered once and never rewritten');
END;

CREATE TRIGGER l2_jobs_are_never_deleted
BEFORE DELETE ON l2_jobs
BEGIN
    SELECT RAISE(ABORT, 'ratchet: L2 jobs are never deleted');
END;
