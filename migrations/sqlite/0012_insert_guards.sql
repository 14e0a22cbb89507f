-- Every key of a ratcheted or append-only table refuses a second row (issue 18,
-- point 7). SQLite's REPLACE conflict resolution (`INSERT OR REPLACE`,
-- `REPLACE INTO`) deletes the row holding the key without firing its delete
-- triggers unless `recursive_triggers` is on, which a plain connection (the
-- `sqlite3` shell) never sets: a new quest on an existing (session_id,
-- row_index) wiped a PASS quest with its result. A BEFORE INSERT trigger fires
-- before the conflict is resolved, so each key below raises when a row with it
-- exists. Each lookup is a probe of that key's own index.
--
-- Guarded before this migration: quests(id), submissions(id) and
-- review_decisions(id) (0001), rechecks(id) and rechecks(run_id, quest_id)
-- (0010).
--
-- Not guarded: tables the store or the counting triggers write by upsert
-- (`INSERT ... ON CONFLICT DO UPDATE/NOTHING`), whose rows are running figures
-- and not history: session_counts, l2_verifier_stats, l2_pair_stats,
-- console_agent_stats, console_fact_counts, console_throughput. A trigger that
-- raises would turn each of those upserts into an error (SQLite cannot tell a
-- REPLACE from an upsert in a trigger). Nor tokens (its hash is upserted, and a
-- live name taken is refused by its unique index as a NameTaken), sessions,
-- session_sources, session_source_chunks and console_sessions: none of them
-- has a ratchet trigger. No guarded table is written with ON CONFLICT,
-- OR IGNORE or OR REPLACE by the store.

CREATE TRIGGER quests_rows_are_never_replaced
BEFORE INSERT ON quests
WHEN EXISTS (SELECT 1 FROM quests WHERE session_id = NEW.session_id AND row_index = NEW.row_index)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: quests: a row with this (session_id, row_index) exists; rows are never replaced');
END;

CREATE TRIGGER leases_ids_are_never_replaced
BEFORE INSERT ON leases
WHEN EXISTS (SELECT 1 FROM leases WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: leases: a row with this id exists; rows are never replaced');
END;

CREATE TRIGGER l2_jobs_ids_are_never_replaced
BEFORE INSERT ON l2_jobs
WHEN EXISTS (SELECT 1 FROM l2_jobs WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: l2_jobs: a row with this id exists; rows are never replaced');
END;

CREATE TRIGGER l2_jobs_questions_are_never_replaced
BEFORE INSERT ON l2_jobs
WHEN EXISTS (SELECT 1 FROM l2_jobs WHERE submission_id = NEW.submission_id
                                      AND verifier = NEW.verifier
                                      AND question_index = NEW.question_index)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: l2_jobs: a row with this (submission_id, verifier, question_index) exists; rows are never replaced');
END;

CREATE TRIGGER l2_answers_are_never_replaced
BEFORE INSERT ON l2_answers
WHEN EXISTS (SELECT 1 FROM l2_answers WHERE job_id = NEW.job_id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: l2_answers: a row with this job_id exists; rows are never replaced');
END;

CREATE TRIGGER l2_decisions_are_never_replaced
BEFORE INSERT ON l2_decisions
WHEN EXISTS (SELECT 1 FROM l2_decisions WHERE submission_id = NEW.submission_id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: l2_decisions: a row with this submission_id exists; rows are never replaced');
END;

CREATE TRIGGER recheck_runs_ids_are_never_replaced
BEFORE INSERT ON recheck_runs
WHEN EXISTS (SELECT 1 FROM recheck_runs WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: recheck_runs: a row with this id exists; rows are never replaced');
END;

-- The partial unique index recheck_runs_one_open, guarded under its own condition.
CREATE TRIGGER recheck_runs_open_run_is_never_replaced
BEFORE INSERT ON recheck_runs
WHEN NEW.finished_at IS NULL
  AND EXISTS (SELECT 1 FROM recheck_runs WHERE session_id = NEW.session_id AND finished_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: recheck_runs: a row with this session_id and no finished_at exists; rows are never replaced');
END;

-- `seq` is the rowid: an insert that leaves it to AUTOINCREMENT sees NEW.seq
-- as -1 here, which matches no row (AUTOINCREMENT counts from 1).
CREATE TRIGGER verifier_switches_are_never_replaced
BEFORE INSERT ON verifier_switches
WHEN EXISTS (SELECT 1 FROM verifier_switches WHERE seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: verifier_switches: a row with this seq exists; rows are never replaced');
END;
