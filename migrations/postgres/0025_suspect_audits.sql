-- Audits of suspects (issue 22, point 3): with `gold.audit_suspects`, each
-- PASS the gold floor marks suspect gets a label-only audit review, as a
-- post-hoc audit does, but caused by the mark: its label is no sample of
-- the error bound (only `draw`n audits are). An audit's cause is fixed.

ALTER TABLE audit_reviews ADD COLUMN cause TEXT NOT NULL DEFAULT 'draw'
    CHECK (cause IN ('draw', 'suspect'));

DROP TRIGGER audit_reviews_label_is_final ON audit_reviews;
CREATE TRIGGER audit_reviews_label_is_final BEFORE UPDATE ON audit_reviews
FOR EACH ROW WHEN (OLD.decision IS NOT NULL OR NEW.quest_id <> OLD.quest_id
                   OR NEW.session_id <> OLD.session_id OR NEW.cause <> OLD.cause)
EXECUTE FUNCTION audit_reviews_label_is_final();
