-- Canaries (issue 22, point 4): items for which no honest result can pass.
-- A canary that ends PASS pauses its token in every session: a pause with
-- the reason `canary`, kept in the session where it passed and read by
-- every session's `next`. One such pause is live per token; the other
-- reasons stay one live pause per token and session. SQLite cannot change
-- a CHECK, so `token_pauses` is made again (its suspect marks, which refer
-- to it, are set aside and put back).
--
-- `canary_passes` records each canary that ended PASS: in which session,
-- whose token, who decided it (the gate, the verifiers or a reviewer, whose
-- token is kept) and the pause it caused (none when the token was paused so
-- already). Append-only.

CREATE TEMPORARY TABLE suspect_marks_kept AS SELECT * FROM suspect_marks;
DROP TABLE suspect_marks;

CREATE TABLE token_pauses_next (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    token_id    TEXT NOT NULL REFERENCES tokens (id),
    agent       TEXT NOT NULL,
    reason      TEXT NOT NULL CHECK (reason IN ('consecutive_done', 'unqualified', 'canary')),
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

CREATE UNIQUE INDEX token_pauses_live ON token_pauses (session_id, token_id)
    WHERE resumed_at IS NULL AND reason <> 'canary';
CREATE UNIQUE INDEX token_pauses_canary ON token_pauses (token_id)
    WHERE resumed_at IS NULL AND reason = 'canary';
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
INSERT INTO suspect_marks SELECT * FROM suspect_marks_kept;
DROP TABLE suspect_marks_kept;

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

CREATE TABLE canary_passes (
    quest_id       TEXT PRIMARY KEY REFERENCES quests (id),
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    token_id       TEXT NOT NULL REFERENCES tokens (id),
    item_id        TEXT NOT NULL REFERENCES gold_items (id),
    decided_by     TEXT NOT NULL,
    reviewer_token TEXT,
    pause_id       TEXT REFERENCES token_pauses (id),
    passed_at      TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX canary_passes_session ON canary_passes (session_id);

CREATE TRIGGER canary_passes_are_never_changed
BEFORE UPDATE ON canary_passes
BEGIN
    SELECT RAISE(ABORT, 'ratchet: canary passes are never changed nor deleted');
END;

CREATE TRIGGER canary_passes_are_never_deleted
BEFORE DELETE ON canary_passes
BEGIN
    SELECT RAISE(ABORT, 'ratchet: canary passes are never changed nor deleted');
END;
