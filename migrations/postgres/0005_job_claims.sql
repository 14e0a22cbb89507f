-- Background work is claimed, not owned: a replica's gate runner and L2
-- verifier runner claim each job here before doing it, for a time; another
-- replica takes a job over only once its claim has expired (the replica that
-- held it died), so no job (no LLM call) runs twice while its claim lives.
CREATE TABLE job_claims (
    job         TEXT PRIMARY KEY,          -- gate:<submission id> | verify:<L2 job id>
    holder      UUID NOT NULL,             -- the claiming replica (store)
    claimed_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    CHECK (expires_at > claimed_at)
);

CREATE INDEX job_claims_expiry ON job_claims (expires_at);
