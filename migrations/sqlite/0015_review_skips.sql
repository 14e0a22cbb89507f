-- Skips on the review page (issue 21, point 1): a reviewer's "not now" for a
-- quest, kept for one console browser session and ended with it, so that
-- the page offers every other quest first, then the one skipped longest ago.
-- Not part of the audit trail: a skip decides nothing.

CREATE TABLE review_skips (
    browser_session TEXT NOT NULL REFERENCES console_sessions (hash),
    quest_id        TEXT NOT NULL REFERENCES quests (id),
    skipped_at      TEXT NOT NULL,
    PRIMARY KEY (browser_session, quest_id)
) WITHOUT ROWID;
