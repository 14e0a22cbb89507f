-- Re-checks: a session's PASS quests re-run through their gate against the
-- world as it is now. A re-check never unlocks anything: the quest stays PASS
-- with its result, receipt and tries; what changes is its mark (`stale`,
-- `unconfirmed` or none), kept on the quest so that every read is cheap, and
-- the re-check's own append-only record.

-- One run per start (an admin's or the schedule's). `finished_at` is set by
-- the record of its last quest. At most one run of a session is unfinished.
CREATE TABLE recheck_runs (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    started_by   TEXT NOT NULL,            -- a token name, or `schedule`
    started_at   TEXT NOT NULL,
    total        INTEGER NOT NULL CHECK (total >= 1),
    finished_at  TEXT
);

CREATE UNIQUE INDEX recheck_runs_one_open ON recheck_runs (session_id) WHERE finished_at IS NULL;
CREATE INDEX recheck_runs_session ON recheck_runs (session_id, started_at);

-- One record per (run, quest): a restart that re-runs the quest's check finds
-- it recorded and writes nothing twice.
CREATE TABLE rechecks (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES recheck_runs (id),
    quest_id      TEXT NOT NULL REFERENCES quests (id),
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    submission_id TEXT REFERENCES submissions (id),  -- the accepted submission re-checked
    verdict       TEXT NOT NULL CHECK (verdict IN ('PASS', 'FAIL', 'REVIEW')),
    outcome       TEXT NOT NULL CHECK (outcome IN ('confirmed', 'approved_again', 'stale', 'unconfirmed')),
    mark          TEXT CHECK (mark IN ('stale', 'unconfirmed')),
    facts         TEXT NOT NULL,
    evidence      TEXT NOT NULL,
    gate          TEXT NOT NULL,
    gate_version  TEXT NOT NULL,
    passed_gate_version TEXT,               -- the version that passed the quest
    digest        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    UNIQUE (run_id, quest_id),
    CHECK ((mark IS NULL) = (outcome IN ('confirmed', 'approved_again'))),
    CHECK (mark IS NULL OR mark = outcome)
);

CREATE INDEX rechecks_quest ON rechecks (quest_id, created_at);

-- The current mark, when it was set, the facts behind it, and the run a quest
-- still awaits (set when a run starts, cleared by the quest's record).
ALTER TABLE quests ADD COLUMN recheck_mark TEXT CHECK (recheck_mark IN ('stale', 'unconfirmed'));
ALTER TABLE quests ADD COLUMN rechecked_at TEXT;
ALTER TABLE quests ADD COLUMN recheck_facts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE quests ADD COLUMN recheck_run TEXT;

CREATE INDEX quests_recheck_due ON quests (recheck_run) WHERE recheck_run IS NOT NULL;
CREATE INDEX quests_recheck_mark ON quests (session_id, recheck_mark) WHERE recheck_mark IS NOT NULL;

-- The ratchet, extended to re-checks ----------------------------------------------

-- A PASS quest is frozen but for its re-check columns: nothing a re-check
-- writes (nor anything else) changes its state, phase, tries, lapses, lease,
-- facts, result, receipt, decision or times.
CREATE TRIGGER quests_pass_changes_only_its_recheck_marks
BEFORE UPDATE ON quests
WHEN OLD.state = 'PASS'
  AND (NEW.state IS NOT OLD.state OR NEW.phase IS NOT OLD.phase OR NEW.tries IS NOT OLD.tries
       OR NEW.lapses IS NOT OLD.lapses OR NEW.leases IS NOT OLD.leases OR NEW.lease_id IS NOT OLD.lease_id
       OR NEW.last_facts IS NOT OLD.last_facts OR NEW.result IS NOT OLD.result
       OR NEW.submission_id IS NOT OLD.submission_id OR NEW.receipt IS NOT OLD.receipt
       OR NEW.decided_by IS NOT OLD.decided_by OR NEW.review_claimed_by IS NOT OLD.review_claimed_by
       OR NEW.review_claim_expires_at IS NOT OLD.review_claim_expires_at
       OR NEW.repeated_failure IS NOT OLD.repeated_failure OR NEW.updated_at IS NOT OLD.updated_at)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a PASS quest is frozen; only its re-check mark changes');
END;

-- Only a PASS quest is re-checked, and a quest's re-check columns change in no
-- other state.
CREATE TRIGGER quests_recheck_marks_belong_to_pass
BEFORE UPDATE ON quests
WHEN NEW.state <> 'PASS'
  AND (NEW.recheck_mark IS NOT OLD.recheck_mark OR NEW.rechecked_at IS NOT OLD.rechecked_at
       OR NEW.recheck_facts IS NOT OLD.recheck_facts OR NEW.recheck_run IS NOT OLD.recheck_run)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: only a PASS quest is re-checked');
END;

-- A quest's mark moves only with its re-check record, and says what it says.
CREATE TRIGGER quests_recheck_marks_have_their_record
BEFORE UPDATE ON quests
WHEN (NEW.recheck_mark IS NOT OLD.recheck_mark OR NEW.rechecked_at IS NOT OLD.rechecked_at
      OR NEW.recheck_facts IS NOT OLD.recheck_facts)
  AND NOT EXISTS (
      SELECT 1 FROM rechecks r
      WHERE r.quest_id = NEW.id AND r.created_at = NEW.rechecked_at
        AND r.mark IS NEW.recheck_mark AND r.facts = NEW.recheck_facts
        -- the latest record: an older one cannot un-stale the quest
        AND NOT EXISTS (SELECT 1 FROM rechecks l
                        WHERE l.quest_id = NEW.id AND l.created_at > NEW.rechecked_at))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a re-check mark needs its re-check record');
END;

CREATE TRIGGER rechecks_only_of_pass_quests
BEFORE INSERT ON rechecks
WHEN (SELECT state FROM quests WHERE id = NEW.quest_id) IS NOT 'PASS'
  OR EXISTS (SELECT 1 FROM rechecks WHERE id = NEW.id OR (run_id = NEW.run_id AND quest_id = NEW.quest_id))
BEGIN
    SELECT RAISE(ABORT, 'ratchet: only a PASS quest is re-checked, and a re-check is never replaced');
END;

CREATE TRIGGER rechecks_are_never_changed
BEFORE UPDATE ON rechecks
BEGIN
    SELECT RAISE(ABORT, 'ratchet: re-checks are append-only');
END;

CREATE TRIGGER rechecks_are_never_deleted
BEFORE DELETE ON rechecks
BEGIN
    SELECT RAISE(ABORT, 'ratchet: re-checks are append-only');
END;

-- A run's identity and size never change; it finishes once.
CREATE TRIGGER recheck_runs_finish_once
BEFORE UPDATE ON recheck_runs
WHEN OLD.finished_at IS NOT NULL OR NEW.id IS NOT OLD.id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.total IS NOT OLD.total OR NEW.started_at IS NOT OLD.started_at
  OR NEW.started_by IS NOT OLD.started_by
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a re-check run finishes once and is never rewritten');
END;

CREATE TRIGGER recheck_runs_are_never_deleted
BEFORE DELETE ON recheck_runs
BEGIN
    SELECT RAISE(ABORT, 'ratchet: re-check runs are never deleted');
END;
