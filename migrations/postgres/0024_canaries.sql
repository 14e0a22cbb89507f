-- Canaries (issue 22, point 4): items for which no honest result can pass.
-- A canary that ends PASS pauses its token in every session: a pause with
-- the reason `canary`, kept in the session where it passed and read by
-- every session's `next`. One such pause is live per token; the other
-- reasons stay one live pause per token and session.
--
-- `canary_passes` records each canary that ended PASS: in which session,
-- whose token, who decided it (the gate, the verifiers or a reviewer, whose
-- token is kept) and the pause it caused (none when the token was paused so
-- already). Append-only.

ALTER TABLE token_pauses DROP CONSTRAINT token_pauses_reason_check;
ALTER TABLE token_pauses ADD CONSTRAINT token_pauses_reason_check
    CHECK (reason IN ('consecutive_done', 'unqualified', 'canary'));

DROP INDEX token_pauses_live;
CREATE UNIQUE INDEX token_pauses_live ON token_pauses (session_id, token_id)
    WHERE resumed_at IS NULL AND reason <> 'canary';
CREATE UNIQUE INDEX token_pauses_canary ON token_pauses (token_id)
    WHERE resumed_at IS NULL AND reason = 'canary';

CREATE TABLE canary_passes (
    quest_id       UUID PRIMARY KEY REFERENCES quests (id),
    session_id     UUID NOT NULL REFERENCES sessions (id),
    token_id       UUID NOT NULL REFERENCES tokens (id),
    item_id        UUID NOT NULL REFERENCES gold_items (id),
    decided_by     TEXT NOT NULL,
    reviewer_token UUID,
    pause_id       UUID REFERENCES token_pauses (id),
    passed_at      TIMESTAMPTZ NOT NULL
);

CREATE INDEX canary_passes_session ON canary_passes (session_id);

CREATE TRIGGER canary_passes_are_final BEFORE UPDATE OR DELETE ON canary_passes
FOR EACH ROW EXECUTE FUNCTION ratchet_refuse_trigger('canary passes are never changed nor deleted');
CREATE TRIGGER canary_passes_are_never_truncated BEFORE TRUNCATE ON canary_passes
FOR EACH STATEMENT EXECUTE FUNCTION ratchet_refuse_trigger('canary passes are never changed nor deleted');
