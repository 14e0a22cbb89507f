-- migrations/sqlite/0010 on PostgreSQL: re-checks of PASS quests against the
-- world as it is now. A re-check never unlocks anything: the quest stays PASS
-- with its result, receipt and tries; its mark (`stale`, `unconfirmed` or
-- none) lives on the quest, and every re-check has its append-only record.

CREATE TABLE recheck_runs (
    id           UUID PRIMARY KEY,
    session_id   UUID NOT NULL REFERENCES sessions (id),
    started_by   TEXT NOT NULL,            -- a token name, or `schedule`
    started_at   TIMESTAMPTZ NOT NULL,
    total        BIGINT NOT NULL CHECK (total >= 1),
    finished_at  TIMESTAMPTZ
);

CREATE UNIQUE INDEX recheck_runs_one_open ON recheck_runs (session_id) WHERE finished_at IS NULL;
CREATE INDEX recheck_runs_session ON recheck_runs (session_id, started_at);

CREATE TABLE rechecks (
    id            UUID PRIMARY KEY,
    run_id        UUID NOT NULL REFERENCES recheck_runs (id),
    quest_id      UUID NOT NULL REFERENCES quests (id),
    session_id    UUID NOT NULL REFERENCES sessions (id),
    submission_id UUID REFERENCES submissions (id),
    verdict       TEXT NOT NULL CHECK (verdict IN ('PASS', 'FAIL', 'REVIEW')),
    outcome       TEXT NOT NULL CHECK (outcome IN ('confirmed', 'approved_again', 'stale', 'unconfirmed')),
    mark          TEXT CHECK (mark IN ('stale', 'unconfirmed')),
    facts         JSON NOT NULL,
    evidence      JSON NOT NULL,
    gate          TEXT NOT NULL,
    gate_version  TEXT NOT NULL,
    passed_gate_version TEXT,
    digest        TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (run_id, quest_id),
    CHECK ((mark IS NULL) = (outcome IN ('confirmed', 'approved_again'))),
    CHECK (mark IS NULL OR mark = outcome)
);

CREATE INDEX rechecks_quest ON rechecks (quest_id, created_at);

ALTER TABLE quests ADD COLUMN recheck_mark TEXT CHECK (recheck_mark IN ('stale', 'unconfirmed'));
ALTER TABLE quests ADD COLUMN rechecked_at TIMESTAMPTZ;
ALTER TABLE quests ADD COLUMN recheck_facts JSON NOT NULL DEFAULT '[]';
ALTER TABLE quests ADD COLUMN recheck_run UUID;

CREATE INDEX quests_recheck_due ON quests (recheck_run) WHERE recheck_run IS NOT NULL;
CREATE INDEX quests_recheck_mark ON quests (session_id, recheck_mark) WHERE recheck_mark IS NOT NULL;

-- The ratchet, extended to re-checks (the rules of the SQLite triggers of 0010).
CREATE FUNCTION quests_recheck_ratchet() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A PASS quest is frozen but for its re-check columns.
    IF OLD.state = 'PASS'
       AND (NEW.state IS DISTINCT FROM OLD.state OR NEW.phase IS DISTINCT FROM OLD.phase
            OR NEW.tries IS DISTINCT FROM OLD.tries OR NEW.lapses IS DISTINCT FROM OLD.lapses
            OR NEW.leases IS DISTINCT FROM OLD.leases OR NEW.lease_id IS DISTINCT FROM OLD.lease_id
            OR NEW.last_facts::text IS DISTINCT FROM OLD.last_facts::text
            OR NEW.result::text IS DISTINCT FROM OLD.result::text
            OR NEW.submission_id IS DISTINCT FROM OLD.submission_id
            OR NEW.receipt IS DISTINCT FROM OLD.receipt OR NEW.decided_by IS DISTINCT FROM OLD.decided_by
            OR NEW.review_claimed_by IS DISTINCT FROM OLD.review_claimed_by
            OR NEW.review_claim_expires_at IS DISTINCT FROM OLD.review_claim_expires_at
            OR NEW.repeated_failure IS DISTINCT FROM OLD.repeated_failure
            OR NEW.updated_at IS DISTINCT FROM OLD.updated_at) THEN
        PERFORM ratchet_refuse('a PASS quest is frozen; only its re-check mark changes');
    END IF;
    IF NEW.recheck_mark IS DISTINCT FROM OLD.recheck_mark OR NEW.rechecked_at IS DISTINCT FROM OLD.rechecked_at
       OR NEW.recheck_facts::text IS DISTINCT FROM OLD.recheck_facts::text
       OR NEW.recheck_run IS DISTINCT FROM OLD.recheck_run THEN
        IF NEW.state <> 'PASS' THEN
            PERFORM ratchet_refuse('only a PASS quest is re-checked');
        END IF;
    END IF;
    -- A quest's mark moves only with its re-check record, and says what it says.
    IF (NEW.recheck_mark IS DISTINCT FROM OLD.recheck_mark OR NEW.rechecked_at IS DISTINCT FROM OLD.rechecked_at
        OR NEW.recheck_facts::text IS DISTINCT FROM OLD.recheck_facts::text)
       AND NOT EXISTS (
           SELECT 1 FROM rechecks r
           WHERE r.quest_id = NEW.id AND r.created_at = NEW.rechecked_at
             AND r.mark IS NOT DISTINCT FROM NEW.recheck_mark AND r.facts::text = NEW.recheck_facts::text
             -- the latest record: an older one cannot un-stale the quest
             AND NOT EXISTS (SELECT 1 FROM rechecks l
                             WHERE l.quest_id = NEW.id AND l.created_at > NEW.rechecked_at)) THEN
        PERFORM ratchet_refuse('a re-check mark needs its re-check record');
    END IF;
    RETURN NEW;
END $$;

-- Only updates of a PASS quest or of re-check columns call the function: the
-- agents' loop on TODO quests pays for a comparison, not a call.
CREATE TRIGGER quests_recheck_ratchet BEFORE UPDATE ON quests
FOR EACH ROW WHEN (OLD.state = 'PASS'
    OR NEW.recheck_mark IS DISTINCT FROM OLD.recheck_mark OR NEW.rechecked_at IS DISTINCT FROM OLD.rechecked_at
    OR NEW.recheck_facts::text IS DISTINCT FROM OLD.recheck_facts::text
    OR NEW.recheck_run IS DISTINCT FROM OLD.recheck_run)
EXECUTE FUNCTION quests_recheck_ratchet();

CREATE FUNCTION rechecks_only_of_pass_quests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT state FROM quests WHERE id = NEW.quest_id) IS DISTINCT FROM 'PASS' THEN
        PERFORM ratchet_refuse('only a PASS quest is re-checked');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER rechecks_only_of_pass_quests BEFORE INSERT ON rechecks
FOR EACH ROW EXECUTE FUNCTION rechecks_only_of_pass_quests();
CREATE TRIGGER rechecks_are_never_changed BEFORE UPDATE ON rechecks
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('re-checks are append-only');
CREATE TRIGGER rechecks_are_never_deleted BEFORE DELETE ON rechecks
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('re-checks are append-only');
CREATE TRIGGER rechecks_are_never_truncated BEFORE TRUNCATE ON rechecks
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('re-checks are append-only');

CREATE FUNCTION recheck_runs_finish_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.finished_at IS NOT NULL OR NEW.id <> OLD.id OR NEW.session_id <> OLD.session_id
       OR NEW.total <> OLD.total OR NEW.started_at <> OLD.started_at
       OR NEW.started_by IS DISTINCT FROM OLD.started_by THEN
        PERFORM ratchet_refuse('a re-check run finishes once and is never rewritten');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER recheck_runs_finish_once BEFORE UPDATE ON recheck_runs
FOR EACH ROW EXECUTE FUNCTION recheck_runs_finish_once();
CREATE TRIGGER recheck_runs_are_never_deleted BEFORE DELETE ON recheck_runs
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('re-check runs are never deleted');
CREATE TRIGGER recheck_runs_are_never_truncated BEFORE TRUNCATE ON recheck_runs
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('re-check runs are never deleted');
