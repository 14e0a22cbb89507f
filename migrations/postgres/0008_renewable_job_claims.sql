-- Job claims are short and renewed while their job runs (issue 9): each claim
-- gets an id of its own, so that a renewal or a release names the very claim
-- it holds. A runner whose claim lapsed and was taken over, even by another
-- runner of the same replica, renews nothing and records nothing.
ALTER TABLE job_claims ADD COLUMN claim_id UUID;
UPDATE job_claims SET claim_id = gen_random_uuid();
ALTER TABLE job_claims ALTER COLUMN claim_id SET NOT NULL;
