-- Agents keep earning their work (issue 22, point 3). A token whose gold
-- answers fall under the session's floor is paused there with the reason
-- `unqualified` (SQLite cannot change a CHECK, so the table is made again
-- with its indexes and triggers), and each PASS it obtained from the gate
-- alone since its first wrong gold answer gets a suspect mark: a row of its
-- own, so that a mark never touches a quest and never unlocks one. Marks
-- are never changed nor deleted.

CREATE TABLE token_pauses_next (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    agent       TEXT NOT NULL,
    reason      TEXT NOT NULL CHECK (reason IN ('consecutive_done', 'unqualified')),
    figures     TEXT NOT NULL,
    through_seq INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    resumed_at  TEXT,
    resumed_by  TEXT,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);
INSERT INTO token_pauses_next SELECT * FROM token_pauses;
DROP TABLE token_pauses;
ALTER TABLE token_pauses_next RENAME TO token_pauses;

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

CREATE TABLE suspect_marks (
    quest_id    TEXT PRIMARY KEY REFERENCES quests (id),
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    pause_id    TEXT NOT NULL REFERENCES token_pauses (id),
    marked_at   TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX suspect_marks_session ON suspect_marks (session_id);

CREATE TRIGGER suspect_marks_are_never_changed
BEFORE UPDATE ON suspect_marks
BEGIN
    SELECT RAISE(ABORT, 'ratchet: suspect marks are never changed nor deleted');
END;

CREATE TRIGGER suspect_marks_are_never_deleted
BEFORE DELETE ON suspect_marks
BEGIN
    SELECT RAISE(ABORT, 'ratchet: suspect marks are never changed nor deleted');
END;
