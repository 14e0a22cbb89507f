-- migrations/sqlite/0011 on PostgreSQL: calibration of the AI verifiers
-- against the review queue.
--
-- A review decision made in bulk is no label of any verifier: `bulk` tells it
-- apart. Decisions recorded before this migration cannot be told apart and
-- stay NULL; they are not counted as labels.
ALTER TABLE review_decisions ADD COLUMN bulk BOOLEAN;

CREATE INDEX l2_answers_session ON l2_answers (session_id, verifier, question_index);

-- Each time a session's verifier lost or won back its veto on a question, with
-- the figures that caused it. Append-only; the latest row is the standing.
CREATE TABLE verifier_switches (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id     UUID NOT NULL REFERENCES sessions (id),
    verifier       TEXT NOT NULL,
    question_index INTEGER NOT NULL CHECK (question_index >= 0),
    standing       TEXT NOT NULL CHECK (standing IN ('voting', 'advisory')),
    upheld         BIGINT NOT NULL CHECK (upheld >= 0),
    overruled      BIGINT NOT NULL CHECK (overruled >= 0),
    missed         BIGINT NOT NULL CHECK (missed >= 0),
    cleared        BIGINT NOT NULL CHECK (cleared >= 0),
    kappa          DOUBLE PRECISION NOT NULL,
    min_kappa      DOUBLE PRECISION NOT NULL,
    min_labels     INTEGER NOT NULL,
    decision_id    UUID NOT NULL REFERENCES review_decisions (id),
    created_at     TIMESTAMPTZ NOT NULL
);

CREATE INDEX verifier_switches_session ON verifier_switches (session_id, seq);

CREATE TRIGGER verifier_switches_are_never_changed BEFORE UPDATE ON verifier_switches
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('verifier switches are append-only');
CREATE TRIGGER verifier_switches_are_never_deleted BEFORE DELETE ON verifier_switches
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('verifier switches are append-only');
CREATE TRIGGER verifier_switches_are_never_truncated BEFORE TRUNCATE ON verifier_switches
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('verifier switches are append-only');
