-- Containment (issue 18, point 6): tokens limited to sessions, and pauses;
-- the same tables and rules as migrations/sqlite/0013, which explains them.

ALTER TABLE tokens ADD COLUMN sessions TEXT;

CREATE TABLE token_endings (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  UUID NOT NULL REFERENCES sessions (id),
    token_id    UUID NOT NULL,
    quest_id    UUID NOT NULL REFERENCES quests (id),
    agent       TEXT NOT NULL,
    done        BOOLEAN NOT NULL,
    ended_at    TIMESTAMPTZ NOT NULL
);

CREATE INDEX token_endings_by_token ON token_endings (session_id, token_id, seq);
CREATE INDEX token_endings_by_quest ON token_endings (quest_id);

CREATE FUNCTION quests_record_their_ending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'TODO' AND OLD.lease_id IS NOT NULL
       AND (NEW.state <> 'TODO' OR NEW.phase = 'verifying') THEN
        INSERT INTO token_endings (session_id, token_id, quest_id, agent, done, ended_at)
        SELECT NEW.session_id, left(l.agent, 36)::uuid, NEW.id, l.agent, NEW.state = 'DONE', NEW.updated_at
        FROM leases l WHERE l.id = OLD.lease_id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER quests_record_their_ending AFTER UPDATE OF state, phase ON quests
FOR EACH ROW EXECUTE FUNCTION quests_record_their_ending();

CREATE TRIGGER token_endings_are_never_changed BEFORE UPDATE OR DELETE ON token_endings
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('token endings are append-only');
CREATE TRIGGER token_endings_are_never_truncated BEFORE TRUNCATE ON token_endings
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('token endings are append-only');

CREATE TABLE token_pauses (
    id          UUID PRIMARY KEY,
    session_id  UUID NOT NULL REFERENCES sessions (id),
    token_id    UUID NOT NULL REFERENCES tokens (id),
    agent       TEXT NOT NULL,
    reason      TEXT NOT NULL CHECK (reason IN ('consecutive_done')),
    figures     TEXT NOT NULL,
    through_seq BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    resumed_at  TIMESTAMPTZ,
    resumed_by  TEXT,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);

CREATE UNIQUE INDEX token_pauses_live ON token_pauses (session_id, token_id) WHERE resumed_at IS NULL;
CREATE INDEX token_pauses_by_session ON token_pauses (session_id, created_at);

CREATE FUNCTION token_pauses_resume_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.resumed_at IS NOT NULL
       OR NEW.id <> OLD.id OR NEW.session_id <> OLD.session_id OR NEW.token_id <> OLD.token_id
       OR NEW.agent <> OLD.agent OR NEW.reason <> OLD.reason OR NEW.figures <> OLD.figures
       OR NEW.through_seq <> OLD.through_seq OR NEW.created_at <> OLD.created_at THEN
        PERFORM ratchet_refuse('a pause is append-only but for its resume, written once');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER token_pauses_resume_once BEFORE UPDATE ON token_pauses
FOR EACH ROW EXECUTE FUNCTION token_pauses_resume_once();
CREATE TRIGGER token_pauses_are_never_deleted BEFORE DELETE ON token_pauses
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('pauses are never deleted');
CREATE TRIGGER token_pauses_are_never_truncated BEFORE TRUNCATE ON token_pauses
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('pauses are never deleted');
