-- Agents keep earning their work (issue 22, point 3). A token whose gold
-- answers fall under the session's floor is paused there with the reason
-- `unqualified`, and each PASS it obtained from the gate alone since its
-- first wrong gold answer gets a suspect mark: a row of its own, so that a
-- mark never touches a quest and never unlocks one. Marks are never
-- changed nor deleted.

ALTER TABLE token_pauses DROP CONSTRAINT token_pauses_reason_check;
ALTER TABLE token_pauses ADD CONSTRAINT token_pauses_reason_check
    CHECK (reason IN ('consecutive_done', 'unqualified'));

CREATE TABLE suspect_marks (
    quest_id    UUID PRIMARY KEY REFERENCES quests (id),
    session_id  UUID NOT NULL REFERENCES sessions (id),
    token_id    UUID NOT NULL REFERENCES tokens (id),
    pause_id    UUID NOT NULL REFERENCES token_pauses (id),
    marked_at   TIMESTAMPTZ NOT NULL
);

CREATE INDEX suspect_marks_session ON suspect_marks (session_id);

CREATE TRIGGER suspect_marks_are_final BEFORE UPDATE OR DELETE ON suspect_marks
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('suspect marks are never changed nor deleted');
CREATE TRIGGER suspect_marks_are_never_truncated BEFORE TRUNCATE ON suspect_marks
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('suspect marks are never changed nor deleted');
