-- Idempotency keys and repeated results (issue 18, point 1).
--
-- A submission may carry the client's `Idempotency-Key`, kept with the token
-- that sent it: a later request of that token with that key is answered by
-- this submission instead of being checked again. A key names one
-- submission per token for as long as the submission exists (submissions
-- are never deleted). `repeats` names the FAIL whose result a submission
-- repeats unchanged on the same lease; its own FAIL says so in a fact.

ALTER TABLE submissions
    ADD COLUMN idempotency_token UUID,
    ADD COLUMN idempotency_key TEXT
        CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255),
    ADD COLUMN repeats UUID REFERENCES submissions (id),
    -- A key comes with the token of the submitting agent (`<token id>/<name>`).
    ADD CONSTRAINT submissions_keys_belong_to_their_token CHECK (
        (idempotency_key IS NULL) = (idempotency_token IS NULL)
        AND (idempotency_token IS NULL OR starts_with(agent, idempotency_token::text || '/')));

CREATE UNIQUE INDEX submissions_idempotency ON submissions (idempotency_token, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- What a submission was sent as never changes once it is recorded.
CREATE FUNCTION submissions_keys_are_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.idempotency_token IS DISTINCT FROM OLD.idempotency_token
       OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
       OR NEW.repeats IS DISTINCT FROM OLD.repeats
       OR NEW.result_hash <> OLD.result_hash OR NEW.agent <> OLD.agent THEN
        PERFORM ratchet_refuse('submissions are append-only');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER submissions_keys_are_frozen BEFORE UPDATE ON submissions
FOR EACH ROW EXECUTE FUNCTION submissions_keys_are_frozen();
