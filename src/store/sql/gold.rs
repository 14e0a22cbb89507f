//! Known answers: a session's gold items, and the gold quests handed out
//! from them. A session's gold quests live in its gold companion, a session
//! row that names it in `gold_of`, made with the first item: so they are
//! never among the real session's counts, exports, claims, quality figures
//! or result holders, on either engine, without a rule to say so anywhere
//! else. `next` reads the agent's standing on the pool
//! ([`gold_standing`]) and writes only when the draw says gold
//! ([`lease_gold`]).

use super::Tx;
use super::codec::*;
use crate::domain::gold::GoldKind;
use crate::domain::ids::{GoldItemId, LeaseId, QuestId, SessionId, TokenId};
use crate::domain::pause::PauseReason;
use crate::domain::work::{self, AgentId};
use crate::domain::{EventKind, QuestStatus, Transition};
use crate::store::common::{Turn, pass_event};
use crate::store::decode::quest_row;
use crate::store::{
    GoldAnswerRow, GoldItemRow, GoldReviewRow, GoldStanding, GoldVerifierAnswer, LeaseRow, Marks,
    NewGoldItem, QuestRow, StoreError, UnqualifiedPause,
};

/// Whether agent name `$agent` is one of token `$2`'s (agents are `<token id>/<name>`).
macro_rules! agent_of_token {
    ($agent:literal) => {
        token_of_agent!("$2", $agent)
    };
}

/// The session's gold companion, if it has one (read on the pool).
pub async fn companion_of(
    pool: &Pool,
    session: SessionId,
) -> Result<Option<SessionId>, StoreError> {
    let row = sqlx::query("SELECT id FROM sessions WHERE gold_of = $1")
        .bind(session)
        .fetch_optional(pool)
        .await?;
    row.map(|r| r.id("id")).transpose()
}

/// The session's gold companion, if it has one.
async fn companion(tx: &mut Tx, session: SessionId) -> Result<Option<SessionId>, StoreError> {
    let row = tx
        .row(sqlx::query("SELECT id FROM sessions WHERE gold_of = $1").bind(session))
        .await?;
    row.map(|r| r.id("id")).transpose()
}

/// Adds gold items to a session (making its companion with the first);
/// the number of items it holds now.
pub async fn add_gold(
    tx: &mut Tx,
    session: SessionId,
    items: Vec<NewGoldItem>,
) -> Result<u64, StoreError> {
    tx.take_turns(Turn::GoldItems(session)).await?;
    let real = tx.session(session).await?;
    if real.gold_of.is_some() {
        return Err(StoreError::NotFound("session"));
    }
    if companion(tx, session).await?.is_none() {
        // The companion copies the session's settings: its gold quests are
        // leased, decided and verified as the session's own are.
        tx.exec(
            sqlx::query(
                "INSERT INTO sessions (id, name, key_column, gate_kind, config, columns, source_name,
                                       source_type, total, max_tries, max_lapses, lease_seconds,
                                       created_by, created_at, gold_of)
                 SELECT $2, name, key_column, gate_kind, config, columns, source_name, source_type, 0,
                        max_tries, max_lapses, lease_seconds, created_by, $3, id
                 FROM sessions WHERE id = $1",
            )
            .bind(session)
            .bind(SessionId::random())
            .bind(at(tx.now)),
        )
        .await?;
    }
    let next = tx
        .row(
            sqlx::query("SELECT COUNT(*) AS n FROM gold_items WHERE session_id = $1").bind(session),
        )
        .await?
        .map(|r| r.count("n"))
        .transpose()?
        .unwrap_or(0);
    let added = items.len() as u64;
    for (i, item) in items.into_iter().enumerate() {
        tx.exec(
            sqlx::query(
                "INSERT INTO gold_items (id, session_id, seq, kind, input, expected, compare, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(GoldItemId::random())
            .bind(session)
            .bind((next + i as u64) as i64)
            .bind(item.kind.as_str())
            .bind(doc(&item.input))
            .bind((item.kind == GoldKind::Gold).then(|| doc(&item.expected)))
            .bind(doc(&item.compare))
            .bind(at(tx.now)),
        )
        .await?;
    }
    Ok(next + added)
}

/// A session's gold items, in the order they were added, each with how
/// often it was handed out.
pub async fn gold_items(pool: &Pool, session: SessionId) -> Result<Vec<GoldItemRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT i.*, (SELECT COUNT(*) FROM gold_quests g WHERE g.item_id = i.id) AS handed_out
         FROM gold_items i WHERE i.session_id = $1 ORDER BY i.seq",
    )
    .bind(session)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GoldItemRow {
                id: r.id("id")?,
                seq: r.count("seq")?,
                kind: r.parsed("kind")?,
                input: r.json("input")?,
                expected: r.opt_json("expected")?,
                compare: r.json("compare")?,
                created_at: r.at("created_at")?,
                handed_out: r.count("handed_out")?,
            })
        })
        .collect()
}

/// The quest an agent holds in `session`, with its lease, if any.
const HELD: &str = "SELECT q.*, l.id AS held_lease, l.expires_at AS held_until
     FROM leases l JOIN quests q ON q.id = l.quest_id
     WHERE l.session_id = $1 AND l.agent = $2 AND l.ended_at IS NULL AND l.expires_at > $3";

fn held(row: &impl Columns, agent: &AgentId) -> Result<(QuestRow, LeaseRow), StoreError> {
    let quest = quest_row(row)?;
    let lease = LeaseRow {
        id: row.id("held_lease")?,
        quest_id: quest.id,
        agent: agent.clone(),
        expires_at: row.at("held_until")?,
    };
    Ok((quest, lease))
}

/// What `next` needs to decide whether the agent's assignment is gold.
pub async fn gold_standing(
    pool: &Pool,
    session: SessionId,
    agent: &AgentId,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<GoldStanding, StoreError> {
    // One read in the common case: the companion and every figure; the
    // held gold quest's row only when the agent holds one.
    let mut conn = pool.acquire().await?;
    let name = agent.to_string();
    let row = sqlx::query(concat!(
        "SELECT c.id AS companion,
                EXISTS (SELECT 1 FROM leases WHERE session_id = c.id AND agent = $4
                        AND ended_at IS NULL AND expires_at > $5) AS holds_gold,
                EXISTS (SELECT 1 FROM leases WHERE session_id = $1 AND agent = $4
                        AND ended_at IS NULL AND expires_at > $5) AS holds_real,
                (SELECT CAST(COALESCE(SUM(leased), 0) AS BIGINT) FROM console_agent_stats
                 WHERE session_id IN ($1, c.id) AND ",
        agent_of_token!("agent"),
        ") AS assignments,
                (SELECT COUNT(*) FROM gold_quests WHERE session_id = $1 AND token_id = $3) AS golds,
                ",
        paused_in!("$1", "$3"),
        " AS paused,
                EXISTS (SELECT 1 FROM leases WHERE session_id = c.id AND agent = $4
                        AND ended_at IS NULL AND expires_at <= $5) AS lapsed,
                EXISTS (SELECT 1 FROM gold_quests g JOIN quests q ON q.id = g.quest_id
                        WHERE g.session_id = $1 AND g.token_id = $3 AND q.phase = 'open') AS reopened
         FROM sessions c WHERE c.gold_of = $1"
    ))
    .bind(session)
    .bind(agent.token.to_string())
    .bind(agent.token)
    .bind(&name)
    .bind(at(now))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(GoldStanding::default());
    };
    let companion: SessionId = row.id("companion")?;
    let held_gold = match row.flag("holds_gold")? {
        true => sqlx::query(HELD)
            .bind(companion)
            .bind(&name)
            .bind(at(now))
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| held(&r, agent))
            .transpose()?,
        false => None,
    };
    let holds_real = row.flag("holds_real")?;
    Ok(GoldStanding {
        companion: Some(companion),
        held: held_gold,
        holds_real,
        assignments: row.count("assignments")?,
        golds: row.count("golds")?,
        paused: row.flag("paused")?,
        lapsed: row.flag("lapsed")?,
        reopened: row.flag("reopened")?,
    })
}

/// Leases the agent a gold quest of `session`: the one it holds (a `next`
/// that raced this one leased it), else its token's gold quest that went
/// back to open (released, or its lease lapsed: handed back as a real quest
/// would be), else, when `golds` is given (the draw said gold, with that
/// many gold quests so far), a new one made from an item its token has not
/// had. Only when a real quest is open (gold takes the place of a real
/// assignment), the agent holds no real quest, is not paused and its token
/// is under its lease cap. `None`: the agent is
/// to be assigned a real quest as usual.
pub async fn lease_gold(
    tx: &mut Tx,
    session: SessionId,
    agent: AgentId,
    golds: Option<u64>,
) -> Result<Option<(QuestRow, LeaseRow)>, StoreError> {
    tx.take_turns(Turn::GoldHandOut(session, agent.token))
        .await?;
    // As every `next` does before it reads the token's pauses.
    tx.take_turns(Turn::PauseRead(session, agent.token)).await?;
    let Some(companion) = companion(tx, session).await? else {
        return Ok(None);
    };
    let name = agent.to_string();
    if let Some(row) = tx
        .row(
            sqlx::query(HELD)
                .bind(companion)
                .bind(&name)
                .bind(at(tx.now)),
        )
        .await?
    {
        return Ok(Some(held(&row, &agent)?));
    }
    let token = agent.token.to_string();
    let row = tx
        .row(
            sqlx::query(concat!(
                "SELECT EXISTS (SELECT 1 FROM leases WHERE session_id = $1 AND ended_at IS NULL
                                AND agent = $5) AS holds,
                        ",
                paused_in!("$1", "$4"),
                " AS paused,
                        EXISTS (SELECT 1 FROM quests WHERE session_id = $1 AND phase = 'open') AS open,
                        (SELECT COUNT(*) FROM gold_quests WHERE session_id = $1 AND token_id = $4) AS golds,
                        (SELECT g.quest_id FROM gold_quests g JOIN quests q ON q.id = g.quest_id
                         WHERE g.session_id = $1 AND g.token_id = $4 AND q.phase = 'open'
                         ORDER BY g.handed_at LIMIT 1) AS reopened,
                        (SELECT t.max_leases FROM tokens t WHERE t.id = $4) AS max_leases,
                        (SELECT COUNT(*) FROM leases WHERE ended_at IS NULL AND ",
                agent_of_token!("agent"),
                ") AS live"
            ))
            .bind(session)
            .bind(&token)
            .bind(companion)
            .bind(agent.token)
            .bind(&name),
        )
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    let capped = row
        .opt_int("max_leases")?
        .is_some_and(|max| row.count("live").is_ok_and(|live| live as i64 >= max));
    // Gold only in place of a real assignment: with no real quest open, a
    // gold quest handed back would tell itself apart.
    if row.flag("holds")? || row.flag("paused")? || capped || !row.flag("open")? {
        return Ok(None);
    }
    let companion_row = tx.session(companion).await?;
    let quest_id = match row.opt_id::<QuestId>("reopened")? {
        Some(id) => id,
        None => {
            if Some(row.count("golds")?) != golds {
                return Ok(None);
            }
            match new_gold_quest(tx, session, companion, agent.token).await? {
                Some(id) => id,
                None => return Ok(None),
            }
        }
    };
    let lease_id = LeaseId::new();
    let leased = work::step(QuestStatus::new(), Transition::Lease)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let expires_at = tx.now + chrono::Duration::seconds(companion_row.config.lease_seconds as i64);
    tx.exec(
        sqlx::query(
            "INSERT INTO leases (id, quest_id, session_id, agent, granted_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(lease_id)
        .bind(quest_id)
        .bind(companion)
        .bind(&name)
        .bind(at(tx.now))
        .bind(at(expires_at)),
    )
    .await?;
    let updated = tx
        .row(
            sqlx::query(
                "UPDATE quests SET phase = $2, lease_id = $3, leases = leases + 1, updated_at = $4
                 WHERE id = $1 AND phase = 'open' RETURNING *",
            )
            .bind(quest_id)
            .bind(leased.phase.map(|p| p.as_str()))
            .bind(lease_id)
            .bind(at(tx.now)),
        )
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    let quest = quest_row(&updated)?;
    tx.moved_from(EventKind::Leased, &quest, QuestStatus::new(), None);
    let lease = LeaseRow {
        id: lease_id,
        quest_id,
        agent,
        expires_at,
    };
    Ok(Some((quest, lease)))
}

/// Makes a new gold quest in the companion from an item (gold or canary:
/// they are handed out alike) `token` has not had (none left: `None`),
/// open, and records the hand-out.
async fn new_gold_quest(
    tx: &mut Tx,
    session: SessionId,
    companion: SessionId,
    token: TokenId,
) -> Result<Option<QuestId>, StoreError> {
    let Some(item) = tx
        .row(
            sqlx::query(
                "SELECT i.id, i.input FROM gold_items i
                 WHERE i.session_id = $1
                   AND NOT EXISTS (SELECT 1 FROM gold_quests g WHERE g.item_id = i.id AND g.token_id = $2)
                 ORDER BY random() LIMIT 1",
            )
            .bind(session)
            .bind(token),
        )
        .await?
    else {
        return Ok(None);
    };
    // The companion's row numbers are taken one at a time (replicas too).
    tx.take_turns(Turn::GoldItems(session)).await?;
    let companion_row = tx.session(companion).await?;
    let real = tx.session(session).await?;
    let row_index = tx
        .row(sqlx::query("SELECT COUNT(*) AS n FROM quests WHERE session_id = $1").bind(companion))
        .await?
        .map(|r| r.count("n"))
        .transpose()?
        .unwrap_or(0);
    // Its key is read from the session's key column, as a real quest's is
    // (an item always has one: see the service's checks).
    let input: serde_json::Map<String, serde_json::Value> = item.json("input")?;
    let key = match input.get(&real.key_column) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => return Err(StoreError::Corrupt("a gold item without its key".into())),
    };
    let quest_id = QuestId::random();
    tx.exec(
        sqlx::query(concat!(
            "INSERT INTO quests (id, session_id, row_index, key, input, state, phase, updated_at,
                                 reviews_required",
            quest_max_tries!(",", "max_tries"),
            ") VALUES ($1, $2, $3, $4, $5, 'TODO', 'open', $6, $7",
            quest_max_tries!(",", "(SELECT max_tries FROM sessions WHERE id = $2)"),
            ")"
        ))
        .bind(quest_id)
        .bind(companion)
        .bind(row_index as i64)
        .bind(key)
        .bind(doc(&input))
        .bind(at(tx.now))
        .bind(companion_row.config.reviewers() as i32),
    )
    .await?;
    tx.exec(
        sqlx::query(
            "INSERT INTO gold_quests (quest_id, item_id, session_id, token_id, handed_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(quest_id)
        .bind(item.id::<GoldItemId>("id")?)
        .bind(session)
        .bind(token)
        .bind(at(tx.now)),
    )
    .await?;
    Ok(Some(quest_id))
}

/// A session's decided gold quests (or one token's), oldest decision
/// first, each with the result and the agent of its last submission.
macro_rules! gold_answers {
    ($token:literal) => {
        concat!(
            "SELECT g.quest_id, g.token_id, g.item_id, i.expected, i.compare, q.updated_at,
                    (SELECT s.result FROM submissions s WHERE s.quest_id = q.id
                     ORDER BY s.created_at DESC, s.id DESC LIMIT 1) AS answer,
                    (SELECT s.agent FROM submissions s WHERE s.quest_id = q.id
                     ORDER BY s.created_at DESC, s.id DESC LIMIT 1) AS agent
             FROM gold_quests g
             JOIN gold_items i ON i.id = g.item_id
             JOIN quests q ON q.id = g.quest_id
             WHERE g.session_id = $1 AND i.kind = 'gold' AND q.state <> 'TODO'",
            $token,
            " ORDER BY q.updated_at, g.quest_id"
        )
    };
}

pub async fn gold_answers(
    pool: &Pool,
    session: SessionId,
    token: Option<TokenId>,
) -> Result<Vec<GoldAnswerRow>, StoreError> {
    let rows = match token {
        None => sqlx::query(gold_answers!("")).bind(session),
        Some(t) => sqlx::query(gold_answers!(" AND g.token_id = $2"))
            .bind(session)
            .bind(t),
    }
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GoldAnswerRow {
                quest_id: r.id("quest_id")?,
                token: r.id("token_id")?,
                item: r.id("item_id")?,
                expected: r.json("expected")?,
                compare: r.json("compare")?,
                answer: r.opt_json("answer")?,
                agent: r.opt_text("agent")?.map(|a| {
                    a.split_once('/')
                        .map_or(a.clone(), |(_, name)| name.to_owned())
                }),
                decided_at: r.at("updated_at")?,
            })
        })
        .collect()
}

/// Pauses a token whose gold answers fell under the session's floor
/// (unless it is paused there already) and marks suspect its PASSes that
/// the gate alone decided since its first wrong gold answer. The sessions
/// whose live leases of the token the engine then releases (the session and
/// its gold companion): none when it was paused already.
pub async fn pause_unqualified(
    tx: &mut Tx,
    p: UnqualifiedPause,
) -> Result<Vec<SessionId>, StoreError> {
    tx.take_turns(Turn::Pause(p.session, p.token)).await?;
    let live = tx
        .row(
            sqlx::query(concat!("SELECT 1 AS live WHERE ", paused_in!("$1", "$2")))
                .bind(p.session)
                .bind(p.token),
        )
        .await?;
    if live.is_some() {
        return Ok(Vec::new());
    }
    let through = super::pause_rule::last_ending(tx, p.session, p.token).await?;
    let pause_id = crate::store::columns::RowId::new();
    tx.exec(
        sqlx::query(super::pause_rule::INSERT_PAUSE)
            .bind(pause_id)
            .bind(p.session)
            .bind(p.token)
            .bind(p.agent.clone())
            .bind(PauseReason::Unqualified.as_str())
            .bind(p.figures.to_string())
            .bind(through)
            .bind(at(tx.now)),
    )
    .await?;
    let mut marked = 0usize;
    if let Some(since) = p.since {
        let rows = tx
            .rows(
                sqlx::query(concat!(
                    "INSERT INTO suspect_marks (quest_id, session_id, token_id, pause_id, marked_at)
                     SELECT q.id, q.session_id, $3, $4, $5 FROM quests q
                     JOIN submissions s ON s.id = q.submission_id
                     WHERE q.session_id = $1 AND q.state = 'PASS' AND q.decided_by = 'gate'
                       AND ",
                    agent_of_token!("s.agent"),
                    " AND s.decided_at >= $6
                       AND NOT EXISTS (SELECT 1 FROM l2_jobs j WHERE j.submission_id = s.id)
                     ON CONFLICT (quest_id) DO NOTHING
                     RETURNING quest_id"
                ))
                .bind(p.session)
                .bind(p.token.to_string())
                .bind(p.token)
                .bind(pause_id)
                .bind(at(tx.now))
                .bind(at(since)),
            )
            .await?;
        marked = rows.len();
        for row in &rows {
            let event = pass_event(
                EventKind::MarkedSuspect,
                p.session,
                row.id("quest_id")?,
                tx.now,
            );
            tx.publish(event);
        }
    }
    if p.audit && marked > 0 {
        // Label-only reviews caused by the mark: never a sample of the bound.
        tx.exec(
            sqlx::query(
                "INSERT INTO audit_reviews (quest_id, session_id, drawn_at, cause)
                 SELECT quest_id, session_id, $2, 'suspect' FROM suspect_marks WHERE pause_id = $1
                 ON CONFLICT (quest_id) DO NOTHING",
            )
            .bind(pause_id)
            .bind(at(tx.now)),
        )
        .await?;
    }
    tracing::warn!(session = %p.session, token = %p.token, marked, "a token under the gold floor was paused");
    let mut released = vec![p.session];
    released.extend(companion(tx, p.session).await?);
    Ok(released)
}

/// How many of a session's quests carry each mark.
pub async fn mark_counts(pool: &Pool, session: SessionId) -> Result<Marks<u64>, StoreError> {
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM suspect_marks WHERE session_id = $1) AS suspect,
                (SELECT COUNT(*) FROM audit_reviews WHERE session_id = $1 AND decision = 'reject')
                    AS audit_rejected",
    )
    .bind(session)
    .fetch_one(pool)
    .await?;
    Ok(Marks {
        suspect: row.count("suspect")?,
        audit_rejected: row.count("audit_rejected")?,
    })
}

/// The marks on a quest.
pub async fn quest_marks(pool: &Pool, quest: QuestId) -> Result<Marks<bool>, StoreError> {
    let row = sqlx::query(
        "SELECT EXISTS (SELECT 1 FROM suspect_marks WHERE quest_id = $1) AS suspect,
                EXISTS (SELECT 1 FROM audit_reviews WHERE quest_id = $1 AND decision = 'reject')
                    AS audit_rejected",
    )
    .bind(quest)
    .fetch_one(pool)
    .await?;
    Ok(Marks {
        suspect: row.flag("suspect")?,
        audit_rejected: row.flag("audit_rejected")?,
    })
}

/// Every reviewer's decisions on a session's gold quests (bulk ones left
/// out: nobody looked), oldest first.
pub async fn gold_reviews(
    pool: &Pool,
    session: SessionId,
) -> Result<Vec<GoldReviewRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT d.reviewer, d.reviewer_token, d.decision, i.kind, i.expected, i.compare,
                (SELECT s.result FROM submissions s WHERE s.quest_id = g.quest_id
                 ORDER BY s.created_at DESC, s.id DESC LIMIT 1) AS answer
         FROM gold_quests g
         JOIN gold_items i ON i.id = g.item_id
         JOIN review_decisions d ON d.quest_id = g.quest_id
         WHERE g.session_id = $1 AND (d.bulk IS NULL OR d.bulk = FALSE)
         ORDER BY d.created_at, d.id",
    )
    .bind(session)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GoldReviewRow {
                reviewer: r.text("reviewer")?,
                reviewer_token: r.opt_id("reviewer_token")?,
                decision: r.parsed("decision")?,
                kind: r.parsed("kind")?,
                answer: r.opt_json("answer")?,
                expected: r.opt_json("expected")?,
                compare: r.json("compare")?,
            })
        })
        .collect()
}

/// The AI verifiers' clean answers about the answers to a session's gold.
pub async fn gold_verifier_answers(
    pool: &Pool,
    session: SessionId,
) -> Result<Vec<GoldVerifierAnswer>, StoreError> {
    let rows = sqlx::query(
        "SELECT a.verifier, a.question_index, a.flagged, s.result, i.expected, i.compare
         FROM gold_quests g
         JOIN gold_items i ON i.id = g.item_id
         JOIN l2_answers a ON a.quest_id = g.quest_id
         JOIN submissions s ON s.id = a.submission_id
         WHERE g.session_id = $1 AND i.kind = 'gold' AND a.answer IS NOT NULL
         ORDER BY a.verifier, a.question_index",
    )
    .bind(session)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GoldVerifierAnswer {
                verifier: r.text("verifier")?,
                question_index: r.small("question_index")?,
                flagged: r.flag("flagged")?,
                result: r.json("result")?,
                expected: r.json("expected")?,
                compare: r.json("compare")?,
            })
        })
        .collect()
}
