-- A first look counts towards a quest's reviewers only with the token that
-- gave it: decisions recorded without a token (before tokens named
-- reviewers) decide a quest that needs one look, and never stand for a
-- second reviewer (0017 counted each of them as a reviewer of its own).
-- And first looks that disagree leave the quest to an adjudicator: however
-- many agree with the move, one against it means no move without an
-- adjudication.

CREATE OR REPLACE FUNCTION quests_updated_reviews() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM CASE
        WHEN n.reviews_required <> o.reviews_required THEN
            ratchet_refused('a quest''s number of reviewers never changes')
        WHEN o.state = 'REVIEW' AND n.state <> 'REVIEW' AND looks.matching > 0 AND NOT looks.enough THEN
            ratchet_refused('a quest leaves REVIEW only when its reviewers agree or an adjudicator decides')
    END
    FROM old_rows o
    JOIN new_rows n ON n.id = o.id
    LEFT JOIN LATERAL (
        SELECT coalesce(bool_or(d.look = 'adjudication' AND d.decision = m.decision), false)
               OR (CASE WHEN n.reviews_required = 1
                        THEN count(*) FILTER (WHERE d.look = 'first' AND d.decision = m.decision)
                        ELSE count(DISTINCT d.reviewer_token) FILTER (WHERE d.look = 'first' AND d.decision = m.decision)
                   END >= n.reviews_required
                   AND NOT coalesce(bool_or(d.look = 'first' AND d.decision <> m.decision), false)) AS enough,
               count(*) FILTER (WHERE d.decision = m.decision) AS matching
        FROM review_decisions d,
             (SELECT CASE n.state WHEN 'PASS' THEN 'approve' WHEN 'DONE' THEN 'reject' END AS decision) m
        WHERE d.quest_id = n.id) AS looks
        ON o.state = 'REVIEW' AND n.state <> 'REVIEW'
    WHERE n.reviews_required <> o.reviews_required OR (o.state = 'REVIEW' AND n.state <> 'REVIEW');
    RETURN NULL;
END $$;
