//! Containment: which sessions a token may touch, and when a token is paused
//! in a session. Pure rules; the store reads the history they need and writes
//! what they decide.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::Role;
use super::ids::{SessionId, TokenId};

/// The default of a session's `max_consecutive_done`.
pub const DEFAULT_MAX_CONSECUTIVE_DONE: u32 = 5;
/// The largest `max_consecutive_done` a session may set.
pub const MAX_MAX_CONSECUTIVE_DONE: u32 = 10_000;
/// The most sessions one token may be limited to.
pub const MAX_SCOPE_SESSIONS: usize = 1_000;

/// Why a token is paused in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    /// Its last `max_consecutive_done` quests of the session all ended DONE.
    ConsecutiveDone,
    /// The lower bound on its accuracy on the session's gold fell under
    /// `gold.min_accuracy`.
    Unqualified,
    /// A canary it answered (an item no honest result can pass) ended PASS:
    /// the token is paused in every session, not only this one.
    Canary,
}

text_enum!(PauseReason {
    ConsecutiveDone => "consecutive_done",
    Unqualified => "unqualified",
    Canary => "canary",
});

/// One quest that left a token's hands, as the pause rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// It ended DONE (by tries or by lapses), not PASS, REVIEW or verifying.
    pub done: bool,
}

/// What the rule decided: a pause, with the figures that caused it.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseDecision {
    pub reason: PauseReason,
    pub figures: Value,
}

/// The pause rule: a token is paused in a session when the last
/// `max_consecutive_done` quests of that session that ended while last held
/// by the token all ended DONE. `recent` holds its latest endings since its
/// last pause, newest first (at least `max_consecutive_done` of them when it
/// has that many). `max_consecutive_done = 0` turns the rule off.
pub fn pause_after(max_consecutive_done: u32, recent: &[Ending]) -> Option<PauseDecision> {
    let n = max_consecutive_done as usize;
    if n == 0 || recent.len() < n || !recent[..n].iter().all(|e| e.done) {
        return None;
    }
    Some(PauseDecision {
        reason: PauseReason::ConsecutiveDone,
        figures: json!({"consecutive_done": n, "max_consecutive_done": max_consecutive_done}),
    })
}

/// A pause of a token in a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub id: uuid::Uuid,
    pub session_id: SessionId,
    pub token_id: TokenId,
    /// The agent name of the quest that made the pause (shown only: agents
    /// choose their names, so the token is what is paused).
    pub agent: String,
    pub reason: PauseReason,
    pub figures: Value,
    pub created_at: DateTime<Utc>,
    pub resumed_at: Option<DateTime<Utc>>,
    /// The name of the token that resumed it.
    pub resumed_by: Option<String>,
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            PauseReason::ConsecutiveDone => write!(
                f,
                "this token is paused in this session: its last {} quests here all ended DONE \
                 (out of tries or lapsed); stop and tell the operator. An admin resumes it with \
                 `quest agent resume {}` or on the session's page in the console",
                self.figures["consecutive_done"], self.token_id
            ),
            PauseReason::Unqualified => write!(
                f,
                "this token is paused in this session: its answers to quests whose right result \
                 is known were right {} times in {} (at least {:.1}% with 95% confidence, under the \
                 session's floor of {:.1}%); stop and tell the operator. An admin resumes it with \
                 `quest agent resume {}` or on the session's page in the console",
                self.figures["correct"],
                self.figures["answered"],
                self.figures["accuracy_lower_bound"].as_f64().unwrap_or(0.0) * 100.0,
                self.figures["min_accuracy"].as_f64().unwrap_or(0.0) * 100.0,
                self.token_id
            ),
            PauseReason::Canary => write!(
                f,
                "this token is paused in every session: a quest of session {} built so that no \
                 honest result can pass it ended PASS on its answer; stop and tell the operator. \
                 An admin resumes it with `quest agent resume {} --session {}` or on that \
                 session's page in the console",
                self.session_id, self.token_id, self.session_id
            ),
        }
    }
}

/// Checks the sessions a new token is limited to: none (every session), or
/// 1 to [`MAX_SCOPE_SESSIONS`] ids, never for an admin token. The ids come
/// back sorted and without repeats.
pub fn scope_for(
    role: Role,
    sessions: Option<Vec<SessionId>>,
) -> Result<Option<Vec<SessionId>>, String> {
    let Some(mut ids) = sessions else {
        return Ok(None);
    };
    if role == Role::Admin {
        return Err(
            "an admin token cannot be limited to sessions; leave `sessions` out, or give the \
                    limit to an agent, reviewer or viewer token"
                .into(),
        );
    }
    ids.sort();
    ids.dedup();
    if ids.is_empty() || ids.len() > MAX_SCOPE_SESSIONS {
        return Err(format!(
            "`sessions` names 1 to {MAX_SCOPE_SESSIONS} session ids; leave it out for every session"
        ));
    }
    Ok(Some(ids))
}

/// Whether a token limited to `scope` (`None`: every session) may touch `session`.
pub fn in_scope(scope: Option<&[SessionId]>, session: SessionId) -> bool {
    scope.is_none_or(|ids| ids.contains(&session))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Ending = Ending { done: true };
    const PASSED: Ending = Ending { done: false };

    #[test]
    fn a_token_whose_last_n_endings_are_all_done_is_paused() {
        let p = pause_after(3, &[DONE, DONE, DONE]).expect("paused");
        assert_eq!(p.reason, PauseReason::ConsecutiveDone);
        assert_eq!(p.figures["consecutive_done"], 3);
    }

    #[test]
    fn fewer_endings_than_the_limit_do_not_pause() {
        assert_eq!(pause_after(3, &[DONE, DONE]), None);
        assert_eq!(pause_after(3, &[]), None);
    }

    #[test]
    fn one_pass_among_the_last_n_endings_keeps_the_token_working() {
        assert_eq!(pause_after(3, &[DONE, PASSED, DONE, DONE]), None);
        assert_eq!(pause_after(3, &[DONE, DONE, PASSED]), None);
    }

    #[test]
    fn only_the_latest_n_endings_count() {
        assert!(pause_after(2, &[DONE, DONE, PASSED, PASSED]).is_some());
    }

    #[test]
    fn zero_turns_the_rule_off() {
        assert_eq!(pause_after(0, &[DONE; 10]), None);
    }

    #[test]
    fn admin_tokens_cannot_be_scoped_and_scopes_are_sorted_without_repeats() {
        let (a, b) = (SessionId::new(), SessionId::new());
        assert!(scope_for(Role::Admin, Some(vec![a])).is_err());
        assert!(scope_for(Role::Agent, Some(vec![])).is_err());
        assert_eq!(scope_for(Role::Agent, None), Ok(None));
        let scope = scope_for(Role::Viewer, Some(vec![b, a, b]))
            .unwrap()
            .unwrap();
        assert_eq!(scope.len(), 2);
        assert!(scope.windows(2).all(|w| w[0] < w[1]));
        assert!(in_scope(Some(&scope), a));
        assert!(!in_scope(Some(&scope), SessionId::new()));
        assert!(in_scope(None, a));
    }
}
