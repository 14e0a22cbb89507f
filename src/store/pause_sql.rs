//! The SQL of pauses that both engines run as it is (`$N` placeholders,
//! which SQLite reads too); each engine binds its own id and time types and
//! keeps only the dialect's fragments (a list of ids, a lock) to itself.
//! Where a pause is decided: [`super::sqlite::pauses`] (at the end of each
//! write batch) and [`super::postgres::pauses`] (before each commit).

/// The token's latest endings in the session since its last pause, newest
/// first, at most `$3`, each with whether the token is paused there now.
/// Binds: session, token, limit.
pub const RECENT_ENDINGS: &str = "SELECT e.seq, e.done, e.agent,
        EXISTS (SELECT 1 FROM token_pauses p
                WHERE p.session_id = $1 AND p.token_id = $2 AND p.resumed_at IS NULL) AS paused
    FROM token_endings e
    WHERE e.session_id = $1 AND e.token_id = $2
      AND e.seq > COALESCE((SELECT MAX(p.through_seq) FROM token_pauses p
                            WHERE p.session_id = $1 AND p.token_id = $2), 0)
    ORDER BY e.ended_at DESC, e.seq DESC
    LIMIT $3";

/// A new pause. Binds: id, session, token, agent, reason, figures (JSON
/// text), the last ending it counted, now.
pub const INSERT_PAUSE: &str = "INSERT INTO token_pauses
        (id, session_id, token_id, agent, reason, figures, through_seq, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    RETURNING *";

/// Resumes the live pause. Binds: session, token, now, by.
pub const RESUME_PAUSE: &str = "UPDATE token_pauses SET resumed_at = $3, resumed_by = $4
    WHERE session_id = $1 AND token_id = $2 AND resumed_at IS NULL
    RETURNING *";

/// A session's pauses, newest first. Binds: session.
pub const SESSION_PAUSES: &str =
    "SELECT * FROM token_pauses WHERE session_id = $1 ORDER BY created_at DESC, id DESC";

/// The agent name part of `<token id>/<name>`.
pub fn agent_name(agent: &str) -> &str {
    agent.split_once('/').map_or(agent, |(_, name)| name)
}
