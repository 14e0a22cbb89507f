//! The web console's use cases: signing a browser in with a token, the
//! figures of a session's page, the review page's queue and bulk decisions.
//! Like the rest of the service, nothing here speaks HTTP; decisions go
//! through the same use cases as the API's, so the console cannot decide
//! anything the API would refuse.

use crate::domain::gold::Score;
use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::review::Viewer;
use crate::domain::work::Refusal;
use futures_util::StreamExt;
use rand::RngCore;

use super::{Service, ServiceError, check_filter};
use crate::api;
use crate::domain::pause::{Pause, in_scope};
use crate::domain::work::ReviewerId;
use crate::domain::{Decision, Role, token_hash};
use crate::store::{
    AgentStatsRow, FailingCheckRow, QuestPage, QuestQuery, QuestRow, QueuedQuest, StoreError,
    Tally, Throughput,
};

/// How long a browser session lasts after sign-in; it is never extended.
pub const BROWSER_SESSION_SECONDS: u32 = 12 * 3600;
/// The throughput chart covers the session's life so far, within these bounds (minutes).
pub const THROUGHPUT_MINUTES: (u32, u32) = (15, 60);
/// How many of the checks that fail most a session's page shows.
pub const FAILING_CHECKS: u32 = 12;
/// At most this many quests one bulk decision covers.
pub const BULK_LIMIT: u32 = 500;
/// How many decisions of a bulk run are in flight at once (the writer groups them).
const BULK_IN_FLIGHT: usize = 64;

/// A signed-in browser: who it is, and the token its forms must carry.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserSession {
    pub token_id: TokenId,
    /// The token's name: the reviewer's name on every decision.
    pub name: String,
    pub role: Role,
    /// The sessions the token is limited to; `None`: every session.
    pub sessions: Option<Vec<SessionId>>,
    /// The per-session CSRF token.
    pub csrf: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// The digest of its cookie, which names it in the store (its review skips).
    pub hash: String,
    /// A reviewer token that adjudicates.
    pub adjudicate: bool,
}

impl BrowserSession {
    fn of(row: crate::store::BrowserSessionRow, hash: String) -> BrowserSession {
        BrowserSession {
            token_id: row.token.id,
            name: row.token.name,
            role: row.token.role,
            sessions: row.token.sessions,
            csrf: row.csrf,
            expires_at: row.expires_at,
            hash,
            adjudicate: row.token.adjudicate,
        }
    }
}

/// A new browser session and the secret that goes into its cookie (shown this once).
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub cookie: String,
    pub session: BrowserSession,
}

/// One agent's figures on a session's page.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFigures {
    /// The name the agent gives (the token's name when it gives none).
    pub name: String,
    /// The name of its token; `None` when the token is gone.
    pub token_name: Option<String>,
    pub stats: AgentStatsRow,
    /// Submissions per PASS, over its PASSes; `None` before the first.
    pub mean_tries_to_pass: Option<f64>,
    /// Of its quests that are PASS now, how many a re-check found stale.
    pub stale: u64,
    /// Its quests that are PASS now (the base of the stale share).
    pub pass_now: u64,
    /// Its token's score on the session's gold; `None` in a session without gold.
    pub gold: Option<Score>,
}

impl AgentFigures {
    /// The share of its PASS quests that later went stale; `None` without a PASS.
    pub fn stale_share(&self) -> Option<f64> {
        (self.pass_now > 0).then(|| self.stale as f64 / self.pass_now as f64)
    }
}

/// Everything a session's page shows.
#[derive(Debug, Clone)]
pub struct SessionOverview {
    pub session: api::Session,
    pub throughput: Throughput,
    pub agents: Vec<AgentFigures>,
    /// The checks that FAIL most.
    pub failing: Vec<FailingCheckRow>,
    /// The facts that send quests to a person most.
    pub review_reasons: Vec<FailingCheckRow>,
    pub quests: QuestPage,
    /// The AI verifiers' calibration, when the session has verifiers.
    pub verifiers: Option<api::Verifiers>,
    /// The pauses of its tokens, newest first, resumed ones included.
    pub pauses: Vec<NamedPause>,
}

/// A pause as the session's page shows it: with its token's name.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPause {
    pub pause: Pause,
    /// The paused token's name; `None` when no token has its id.
    pub token_name: Option<String>,
}

/// What a bulk decision did, quest by quest.
#[derive(Debug, Clone, Default)]
pub struct BulkOutcome {
    /// Quests decided now: id and key.
    pub decided: Vec<(QuestId, String)>,
    /// Quests left alone because another reviewer holds them: id, key, reviewer.
    pub claimed: Vec<(QuestId, String, String)>,
    /// Quests no longer in REVIEW (decided meanwhile) or unknown.
    pub gone: Vec<QuestId>,
}

/// A random secret of 32 bytes, hex.
fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

impl Service {
    /// Starts a browser session when `secret` is a live token; `None` when it is not.
    pub async fn sign_in(&self, secret: &str) -> Result<Option<SignedIn>, ServiceError> {
        let secret = secret.trim();
        if secret.is_empty() || secret.len() > 500 {
            return Ok(None);
        }
        let Some(token) = self.store.find_token(&token_hash(secret)).await? else {
            return Ok(None);
        };
        let cookie = random_hex(32);
        let hash = token_hash(&cookie);
        let row = match self
            .store
            .create_browser_session(&hash, token.id, &random_hex(16), BROWSER_SESSION_SECONDS)
            .await
        {
            Ok(row) => row,
            // Revoked between the look-up and the write.
            Err(StoreError::Refused(Refusal::TokenRevoked)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(SignedIn {
            cookie,
            session: BrowserSession::of(row, hash),
        }))
    }

    /// The live browser session of a cookie, if any: not signed out, not
    /// expired, and its token not revoked.
    pub async fn browser_session(
        &self,
        cookie: &str,
    ) -> Result<Option<BrowserSession>, ServiceError> {
        if cookie.is_empty() || cookie.len() > 200 {
            return Ok(None);
        }
        let hash = token_hash(cookie);
        Ok(self
            .store
            .find_browser_session(&hash)
            .await?
            .map(|row| BrowserSession::of(row, hash)))
    }

    /// The store's "now": claims and ages on the console's pages are judged by it.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.store.now()
    }

    /// Ends the browser session of a cookie.
    pub async fn sign_out(&self, cookie: &str) -> Result<(), ServiceError> {
        Ok(self.store.end_browser_session(&token_hash(cookie)).await?)
    }

    /// A session with its throughput, agents, failing checks and one page of quests.
    pub async fn session_overview(
        &self,
        id: SessionId,
        query: &QuestQuery,
    ) -> Result<SessionOverview, ServiceError> {
        if query.search.as_deref().is_some_and(|s| s.len() > 200) {
            return Err(super::invalid(
                "invalid_search",
                "search for at most 200 characters of a key",
            ));
        }
        // The table's check is one check by name; the queue's rules refuse the same bad ones.
        check_filter(query.check.as_deref())?;
        let session = self.get_session(id).await?;
        let age = (self.store.now() - session.created_at).num_minutes() + 1;
        let (least, most) = THROUGHPUT_MINUTES;
        let minutes = u32::try_from(age).unwrap_or(most).clamp(least, most);
        let throughput = self.store.throughput(id, minutes).await?;
        let staleness: std::collections::HashMap<String, (u64, u64)> = self
            .store
            .agent_staleness(id)
            .await?
            .into_iter()
            .map(|r| (r.agent, (r.pass, r.stale)))
            .collect();
        let gold = match session.config.gold {
            Some(_) => Some(self.gold_tallies(id).await?),
            None => None,
        };
        let gold_of = |agent: &str| {
            let token = agent.split_once('/')?.0.parse::<TokenId>().ok()?;
            let tallies = gold.as_ref()?;
            Some(
                tallies
                    .get(&token)
                    .map_or_else(|| Score::of(0, 0), |t| t.score()),
            )
        };
        let agents = self
            .store
            .agent_stats(id)
            .await?
            .into_iter()
            .map(|stats| AgentFigures {
                gold: gold_of(&stats.agent),
                pass_now: staleness.get(&stats.agent).map_or(0, |s| s.0),
                stale: staleness.get(&stats.agent).map_or(0, |s| s.1),
                name: stats
                    .agent
                    .split_once('/')
                    .map_or(stats.agent.as_str(), |(_, name)| name)
                    .to_owned(),
                token_name: stats.token_name.clone(),
                mean_tries_to_pass: (stats.pass > 0)
                    .then(|| stats.tries_to_pass as f64 / stats.pass as f64),
                stats,
            })
            .collect();
        let failing = self
            .store
            .failing_checks(id, Tally::Fails, FAILING_CHECKS)
            .await?;
        let review_reasons = self
            .store
            .failing_checks(id, Tally::Reviews, FAILING_CHECKS)
            .await?;
        let quests = self.store.quest_page(id, query).await?;
        let verifiers = match session.config.verify {
            Some(_) => Some(self.list_verifiers(Some(id)).await?),
            None => None,
        };
        Ok(SessionOverview {
            session,
            throughput,
            agents,
            failing,
            review_reasons,
            quests,
            verifiers,
            pauses: self.named_pauses(id).await?,
        })
    }

    /// A session's pauses, newest first, each with its token's name.
    async fn named_pauses(&self, id: SessionId) -> Result<Vec<NamedPause>, ServiceError> {
        let pauses = self.store.pauses(id).await?;
        if pauses.is_empty() {
            return Ok(Vec::new());
        }
        let names: std::collections::HashMap<TokenId, String> = self
            .store
            .list_tokens()
            .await?
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        Ok(pauses
            .into_iter()
            .map(|pause| NamedPause {
                token_name: names.get(&pause.token_id).cloned(),
                pause,
            })
            .collect())
    }

    /// The REVIEW quests the review page lists, oldest first, without their
    /// history (the page reads the history of the one it opens): of
    /// `session` when one is chosen, else of every session a token limited
    /// to `scope` may see (`None`: every session); never of a session
    /// outside the scope (the console refuses to name one before this).
    pub async fn review_list(
        &self,
        viewer: &Viewer,
        scope: Option<&[SessionId]>,
        session: Option<SessionId>,
        check: Option<&str>,
        limit: u32,
    ) -> Result<Vec<QueuedQuest>, ServiceError> {
        let check = check_filter(check)?;
        if let Some(id) = session {
            self.session(id).await?;
        }
        let mut sessions: Option<Vec<SessionId>> = match session {
            Some(id) if in_scope(scope, id) => Some(vec![id]),
            Some(_) => Some(Vec::new()),
            None => scope.map(<[SessionId]>::to_vec),
        };
        // A session's gold quests in review are its own, in its companion.
        if let Some(list) = &mut sessions {
            let mut companions = Vec::new();
            for id in list.iter() {
                companions.extend(self.store.companion(*id).await?);
            }
            list.extend(companions);
        }
        let limit = limit.clamp(1, BULK_LIMIT);
        let mut queue = (self.store)
            .review_queue(sessions.as_deref(), check.as_ref(), limit, viewer)
            .await?;
        for queued in &mut queue {
            queued.quest.session_id = self.outer_session(queued.quest.session_id).await?;
        }
        Ok(queue)
    }

    /// Decides exactly the quests listed, each as the API's decision would,
    /// and says which were left to other reviewers or were decided meanwhile.
    /// An invalid note refuses the whole run before anything changes.
    pub async fn bulk_decide(
        &self,
        reviewer: &ReviewerId,
        quests: &[QuestId],
        decision: Decision,
        note: &str,
    ) -> Result<BulkOutcome, ServiceError> {
        if quests.len() > BULK_LIMIT as usize {
            return Err(super::invalid(
                "too_many_quests",
                format!("decide at most {BULK_LIMIT} quests at once"),
            ));
        }
        let Some((&first, rest)) = quests.split_first() else {
            return Ok(BulkOutcome::default());
        };
        // The first one alone: a note the API refuses is refused here once, with nothing decided.
        let outcome = self.store_decision(reviewer, first, decision, note).await;
        if let Err(e @ ServiceError::Invalid { .. }) = outcome {
            return Err(e);
        }
        let mut outcomes = vec![(first, outcome)];
        let rest: Vec<_> = futures_util::stream::iter(rest.iter().copied())
            .map(|id| async move { (id, self.store_decision(reviewer, id, decision, note).await) })
            .buffered(BULK_IN_FLIGHT)
            .collect()
            .await;
        outcomes.extend(rest);
        let mut out = BulkOutcome::default();
        for (id, outcome) in outcomes {
            match outcome {
                Ok(quest) => out.decided.push((id, quest.key)),
                Err(ServiceError::Store(StoreError::Refused(Refusal::ReviewClaimed {
                    by,
                    ..
                }))) => {
                    let quest = self.store.get_quest(id).await?;
                    out.claimed.push((id, quest.key, by));
                }
                Err(ServiceError::Store(StoreError::NotFound(_) | StoreError::Refused(_))) => {
                    out.gone.push(id)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// One decision of a bulk run: the API's rules, without re-reading the history.
    async fn store_decision(
        &self,
        reviewer: &ReviewerId,
        quest_id: QuestId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, ServiceError> {
        super::check_note(decision, note)?;
        // A bulk decision is no label of the AI verifiers.
        Ok(self
            .store
            .decide_review_in_bulk(quest_id, reviewer, decision, note)
            .await?)
    }
}
