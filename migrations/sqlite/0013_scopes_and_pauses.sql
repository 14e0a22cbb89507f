-- Containment (issue 18, point 6): tokens limited to sessions, and pauses.
--
-- `tokens.sessions` is the JSON array of the session ids a token is limited
-- to; NULL: every session (admin tokens are never limited).
--
-- `token_endings` is the history the pause rule reads: one row each time a
-- quest leaves an agent's hands (TODO while leased or checking, into PASS,
-- REVIEW, DONE or `verifying`), with the token of the lease that last held it
-- and whether it ended DONE (by tries or lapses: a quest enters DONE from TODO
-- only by those). A trigger writes it, so that every path that ends a quest
-- (a verdict, an inline decision, the sweeper, a claim's own sweep) records
-- it in the same statement. Append-only.
--
-- `token_pauses` holds the pauses of a token in a session: append-only, but
-- for its resume, which is written once. `through_seq` is the last ending a
-- pause counted: after a resume, the count starts after it.

ALTER TABLE tokens ADD COLUMN sessions TEXT;

CREATE TABLE token_endings (
    seq         INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL,
    quest_id    TEXT NOT NULL REFERENCES quests (id),
    agent       TEXT NOT NULL,             -- <token id>/<agent name> of the last lease
    done        INTEGER NOT NULL CHECK (done IN (0, 1)),
    ended_at    TEXT NOT NULL
);

CREATE INDEX token_endings_by_token ON token_endings (session_id, token_id, seq);
CREATE INDEX token_endings_by_quest ON token_endings (quest_id);

CREATE TRIGGER quests_record_their_ending
AFTER UPDATE OF state, phase ON quests
WHEN OLD.state = 'TODO' AND OLD.lease_id IS NOT NULL
  AND (NEW.state <> 'TODO' OR NEW.phase = 'verifying')
BEGIN
    INSERT INTO token_endings (session_id, token_id, quest_id, agent, done, ended_at)
    SELECT NEW.session_id, substr(l.agent, 1, instr(l.agent, '/') - 1), NEW.id, l.agent,
           NEW.state = 'DONE', NEW.updated_at
    FROM leases l WHERE l.id = OLD.lease_id;
END;

CREATE TRIGGER token_endings_are_never_changed
BEFORE UPDATE ON token_endings
BEGIN
    SELECT RAISE(ABORT, 'ratchet: token endings are append-only');
END;

CREATE TRIGGER token_endings_are_never_deleted
BEFORE DELETE ON token_endings
BEGIN
    SELECT RAISE(ABORT, 'ratchet: token endings are append-only');
END;

CREATE TRIGGER token_endings_are_never_replaced
BEFORE INSERT ON token_endings
WHEN EXISTS (SELECT 1 FROM token_endings WHERE seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: token_endings: a row with this seq exists; rows are never replaced');
END;

CREATE TABLE token_pauses (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    agent       TEXT NOT NULL,             -- the agent name of the last ending (shown only)
    reason      TEXT NOT NULL CHECK (reason IN ('consecutive_done')),
    figures     TEXT NOT NULL,             -- JSON object: what caused it
    through_seq INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    resumed_at  TEXT,
    resumed_by  TEXT,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);

-- At most one live pause per token and session.
CREATE UNIQUE INDEX token_pauses_live ON token_pauses (session_id, token_id) WHERE resumed_at IS NULL;
CREATE INDEX token_pauses_by_session ON token_pauses (session_id, created_at);

CREATE TRIGGER token_pauses_resume_once
BEFORE UPDATE ON token_pauses
WHEN OLD.resumed_at IS NOT NULL
  OR NEW.id <> OLD.id OR NEW.session_id <> OLD.session_id OR NEW.token_id <> OLD.token_id
  OR NEW.agent <> OLD.agent OR NEW.reason <> OLD.reason OR NEW.figures <> OLD.figures
  OR NEW.through_seq <> OLD.through_seq OR NEW.created_at <> OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'ratchet: a pause is append-only but for its resume, written once');
END;

CREATE TRIGGER token_pauses_are_never_deleted
BEFORE DELETE ON token_pauses
BEGIN
    SELECT RAISE(ABORT, 'ratchet: pauses are never deleted');
END;

CREATE TRIGGER token_pauses_are_never_replaced
BEFORE INSERT ON token_pauses
WHEN EXISTS (SELECT 1 FROM token_pauses WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: token_pauses: a row with this id exists; rows are never replaced');
END;
