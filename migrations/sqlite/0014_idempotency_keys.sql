-- Idempotency keys and repeated results (issue 18, point 1).
--
-- A submission may carry the client's `Idempotency-Key`, kept with the token
-- that sent it: a later request of that token with that key is answered by
-- this submission instead of being checked again. A key names one
-- submission per token for as long as the submission exists (submissions
-- are never deleted). `repeats` names the FAIL whose result a submission
-- repeats unchanged on the same lease; its own FAIL says so in a fact.

ALTER TABLE submissions ADD COLUMN idempotency_token TEXT;
ALTER TABLE submissions ADD COLUMN idempotency_key TEXT
    CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255);
ALTER TABLE submissions ADD COLUMN repeats TEXT REFERENCES submissions (id);

CREATE UNIQUE INDEX submissions_idempotency ON submissions (idempotency_token, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- A key comes with its token, and a token's key with the token that sent it.
CREATE TRIGGER submissions_keys_belong_to_their_token
BEFORE INSERT ON submissions
WHEN (NEW.idempotency_key IS NULL) <> (NEW.idempotency_token IS NULL)
  OR (NEW.idempotency_token IS NOT NULL
      AND substr(NEW.agent, 1, length(NEW.idempotency_token) + 1) <> NEW.idempotency_token || '/')
BEGIN
    SELECT RAISE(ABORT, 'ratchet: submissions: an idempotency key is kept with the token of the submitting agent');
END;

-- As 0012 does for every key of an append-only table: REPLACE would delete
-- the submission holding a (token, key) without its delete trigger.
CREATE TRIGGER submissions_keys_are_never_replaced
BEFORE INSERT ON submissions
WHEN NEW.idempotency_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM submissions
              WHERE idempotency_token = NEW.idempotency_token AND idempotency_key = NEW.idempotency_key
)
BEGIN
    SELECT RAISE(ABORT, 'ratchet: submissions: a row with this (idempotency_token, idempotency_key) exists; rows are never replaced');
END;

-- What a submission was sent as never changes once it is recorded.
CREATE TRIGGER submissions_keys_are_frozen
BEFORE UPDATE ON submissions
WHEN NEW.idempotency_token IS NOT OLD.idempotency_token
  OR NEW.idempotency_key IS NOT OLD.idempotency_key
  OR NEW.repeats IS NOT OLD.repeats
  OR NEW.result_hash <> OLD.result_hash
  OR NEW.agent <> OLD.agent
BEGIN
    SELECT RAISE(ABORT, 'ratchet: submissions are append-only');
END;
