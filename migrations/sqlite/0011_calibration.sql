-- Calibration of the AI verifiers against the review queue.
--
-- A review decision made in bulk (the console's "approve all") is no label of
-- any verifier: `bulk` tells it apart. Decisions recorded before this
-- migration cannot be told apart and stay NULL; they are not counted as labels.
ALTER TABLE review_decisions ADD COLUMN bulk INTEGER CHECK (bulk IN (0, 1));

-- The labels of one session's verifiers are found from their answers.
CREATE INDEX l2_answers_session ON l2_answers (session_id, verifier, question_index);

-- Each time a session's verifier lost or won back its veto on a question
-- (`verify.min_kappa`), with the figures that caused it. Append-only; the
-- latest row of a (session, verifier, question) is its standing, and a
-- verifier without rows is voting.
CREATE TABLE verifier_switches (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    question_index INTEGER NOT NULL CHECK (question_index >= 0),
    standing       TEXT NOT NULL CHECK (standing IN ('voting', 'advisory')),
    upheld         INTEGER NOT NULL CHECK (upheld >= 0),
    overruled      INTEGER NOT NULL CHECK (overruled >= 0),
    missed         INTEGER NOT NULL CHECK (missed >= 0),
    cleared        INTEGER NOT NULL CHECK (cleared >= 0),
    kappa          REAL NOT NULL,
    min_kappa      REAL NOT NULL,
    min_labels     INTEGER NOT NULL,
    decision_id    TEXT NOT NULL REFERENCES review_decisions (id),
    created_at     TEXT NOT NULL
);

CREATE INDEX verifier_switches_session ON verifier_switches (session_id, seq);

CREATE TRIGGER verifier_switches_are_never_changed
BEFORE UPDATE ON verifier_switches
BEGIN
    SELECT RAISE(ABORT, 'verifier switches are append-only');
END;

CREATE TRIGGER verifier_switches_are_never_deleted
BEFORE DELETE ON verifier_switches
BEGIN
    SELECT RAISE(ABORT, 'verifier switches are append-only');
END;
