-- Which other quests of a session hold the same result value: the email gate
-- sends a contact address that another company's quest already holds to
-- review. The lookup compares `lower(json_extract(result, '$.email'))` of the
-- session's decided quests and of its submissions still being checked; these
-- indexes answer it without reading every result of the session.
CREATE INDEX quests_result_email ON quests (session_id, lower(json_extract(result, '$.email')));
CREATE INDEX submissions_pending_by_session ON submissions (session_id) WHERE verdict = 'PENDING';
