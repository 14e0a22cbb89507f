//! The agent loop's operations over the typed client and the lease state file:
//! lease, submit, follow a verdict, heartbeat, release, status. The CLI verbs,
//! `quest mcp` and `quest guard` all go through these, so an agent may mix them
//! and there is one implementation of leasing and submitting. Nothing here
//! prints; [`verdict_text`] words an answer for whichever surface shows it.

use crate::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId};
use std::time::Duration;

use serde_json::{Map, Value};

use super::Ctx;
use super::client::CliError;
use super::state::{Held, Sent};
use crate::api::{
    Lease, LeaseRequest, NextRequest, NextResponse, Session, SubmissionDetail, SubmitRequest,
    SubmitResponse,
};
use crate::domain::{Fact, Phase, State, SubmissionVerdict};

/// Where the agent reads an answer: how its next step is named there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// The shell: `quest next`, `quest submit`.
    Cli,
    /// MCP tools: `quest_next`, `quest_submit`.
    Mcp,
}

impl Surface {
    /// How to ask for the next quest.
    pub fn next(self) -> &'static str {
        match self {
            Surface::Cli => "`quest next`",
            Surface::Mcp => "quest_next",
        }
    }

    /// How to submit a result.
    pub fn submit(self) -> &'static str {
        match self {
            Surface::Cli => "`quest submit`",
            Surface::Mcp => "quest_submit",
        }
    }

    /// The verb that starts a step: a command is run, a tool is called.
    pub fn verb(self) -> &'static str {
        match self {
            Surface::Cli => "Run",
            Surface::Mcp => "Call",
        }
    }

    /// How to follow a PENDING verdict.
    pub fn wait(self) -> &'static str {
        match self {
            Surface::Cli => "`quest wait`",
            Surface::Mcp => "quest_submit with the same result (it costs no try)",
        }
    }
}

fn save(ctx: &Ctx, held: &Held) -> Result<(), CliError> {
    ctx.state
        .save(held)
        .map_err(|e| CliError::Usage(format!("cannot write the state file: {e}")))
}

/// Leases the next quest (or the one this agent holds) and remembers it.
///
/// When the answer is the lease this agent already remembers, it is renewed,
/// so that an agent asking again during long work keeps its quest.
pub async fn lease(ctx: &Ctx) -> Result<NextResponse, CliError> {
    let session = ctx.agent_session()?;
    let request = NextRequest {
        agent: ctx.args.agent.clone(),
    };
    let (_, mut answer): (_, NextResponse) = ctx
        .client
        .post(&format!("/v1/sessions/{session}/next"), &request)
        .await
        .map_err(|e| forgotten_session(ctx, session, e))?;
    if let NextResponse::Assigned { quest, lease, .. } = &mut answer {
        let mut held = ctx.state.load();
        if held.lease_id == Some(lease.id) && held.quest_id == Some(quest.id) {
            // Best effort: a lease the server just handed back is live either way.
            if let Ok(renewed) = renew(ctx, quest.id, lease.id).await {
                *lease = renewed;
            }
        }
        // The last submission stays: the stop guard counts progress by it.
        let submission_id = held
            .submission_id
            .filter(|_| held.session_id == Some(session));
        held = Held {
            session_id: Some(session),
            quest_id: Some(quest.id),
            lease_id: Some(lease.id),
            key: Some(quest.key.clone()),
            submission_id,
            // A submit whose verdict was not shown yet stays retryable.
            sent: held.sent.take(),
        };
        save(ctx, &held)?;
    }
    Ok(answer)
}

async fn renew(ctx: &Ctx, quest: QuestId, lease: LeaseId) -> Result<Lease, CliError> {
    let (_, renewed): (_, Lease) = ctx
        .client
        .post(
            &format!("/v1/quests/{quest}/heartbeat"),
            &LeaseRequest { lease_id: lease },
        )
        .await
        .map_err(forgotten_quest)?;
    Ok(renewed)
}

/// The quest and lease this agent remembers holding, when they belong to the
/// session it is told to work on (`QUEST_SESSION`), if it is told one.
pub fn held_lease(ctx: &Ctx, held: &Held) -> Result<(QuestId, LeaseId), CliError> {
    if let (Some(given), Some(own)) = (ctx.given_session(), held.session_id)
        && given != own
        && held.quest_id.is_some()
    {
        return Err(CliError::Usage(format!(
            "this agent holds a quest of session {own}, not of session {given} (QUEST_SESSION): submit or \
             release it with QUEST_SESSION={own} first"
        )));
    }
    match (held.quest_id, held.lease_id) {
        (Some(quest), Some(lease)) => Ok((quest, lease)),
        _ => Err(CliError::NoLease),
    }
}

/// Whether the quest has left this agent after an answer (decided, or with the AI verifiers).
fn let_go(state: State, phase: Option<Phase>) -> bool {
    state != State::Todo || phase == Some(Phase::Verifying)
}

/// Submits a result for the remembered lease; the server waits up to `wait` seconds.
///
/// The request carries an `Idempotency-Key`, written into the state file
/// (with the result's digest) before it is sent: the same result sent again
/// before its verdict was shown ([`settled`]) reuses the key, so that a
/// rerun of a killed `quest submit` is answered by the submission it made
/// and costs nothing. Once the verdict is shown, the same result again is a
/// new submit with a fresh key (after a FAIL, a new try).
pub async fn submit(
    ctx: &Ctx,
    result: Map<String, Value>,
    wait: u32,
) -> Result<SubmitResponse, CliError> {
    let mut held = ctx.state.load();
    let result_hash = crate::domain::receipt::digest(&Value::Object(result.clone()));
    let sent = match held.sent.take() {
        // The same result for the lease it was sent on (or after the quest let go).
        Some(sent)
            if sent.result_hash == result_hash
                && held.lease_id.is_none_or(|l| l == sent.lease_id) =>
        {
            sent
        }
        _ => {
            let (quest_id, lease_id) = held_lease(ctx, &held)?;
            Sent {
                key: format!("quest-cli-{}", uuid::Uuid::new_v4()),
                result_hash,
                quest_id,
                lease_id,
            }
        }
    };
    let (quest, lease) = (sent.quest_id, sent.lease_id);
    let key = sent.key.clone();
    held.sent = Some(sent);
    save(ctx, &held)?;
    let path = format!("/v1/quests/{quest}/submit?wait={wait}");
    // The server waits up to `wait` seconds for the verdict; leave it that long and a margin.
    let timeout = Duration::from_secs(u64::from(wait) + 30);
    let sent: Result<(_, SubmitResponse), CliError> = ctx
        .client
        .post_keyed(
            &path,
            &SubmitRequest {
                lease_id: lease,
                result,
            },
            &key,
            timeout,
        )
        .await
        .map_err(forgotten_quest);
    let answer = match sent {
        Ok((_, answer)) => answer,
        Err(e) => {
            if matches!(&e, CliError::Refused { code, .. } if code == "idempotency_key_reused") {
                // Not this agent's submit after all (another used the state file): start afresh.
                held.sent = None;
                save(ctx, &held)?;
            }
            return Err(e);
        }
    };
    held.submission_id = Some(answer.submission_id);
    if let_go(answer.state, answer.phase) {
        held.quest_id = None;
        held.lease_id = None;
    }
    save(ctx, &held)?;
    Ok(answer)
}

/// Forgets the submit in flight once its verdict has been shown: the same
/// result sent after this is a new submit. A PENDING answer is no verdict,
/// and keeps it.
pub fn settled(ctx: &Ctx, verdict: SubmissionVerdict) -> Result<(), CliError> {
    if verdict == SubmissionVerdict::Pending {
        return Ok(());
    }
    let mut held = ctx.state.load();
    if held.sent.take().is_some() {
        save(ctx, &held)?;
    }
    Ok(())
}

/// Follows a submission until it has a verdict or `timeout` passes.
pub async fn follow(
    ctx: &Ctx,
    id: SubmissionId,
    timeout: Duration,
) -> Result<SubmissionDetail, CliError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let detail: SubmissionDetail = loop {
        let d: SubmissionDetail = ctx.client.get(&format!("/v1/submissions/{id}")).await?;
        if d.submission.verdict != SubmissionVerdict::Pending
            || tokio::time::Instant::now() >= deadline
        {
            break d;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let mut held = ctx.state.load();
    let state = detail.submission.state_after.unwrap_or(detail.state);
    if detail.submission.verdict != SubmissionVerdict::Pending
        && let_go(state, detail.phase)
        && held.submission_id == Some(id)
    {
        held.quest_id = None;
        held.lease_id = None;
        let _ = ctx.state.save(&held);
    }
    Ok(detail)
}

/// Extends the remembered lease.
pub async fn heartbeat(ctx: &Ctx) -> Result<(Held, Lease), CliError> {
    let held = ctx.state.load();
    let (quest, lease) = held_lease(ctx, &held)?;
    let renewed = renew(ctx, quest, lease).await?;
    Ok((held, renewed))
}

/// Gives the remembered quest back, without a try; returns what was held.
pub async fn release(ctx: &Ctx) -> Result<Held, CliError> {
    let mut held = ctx.state.load();
    let (quest, lease) = held_lease(ctx, &held)?;
    let (_, ()): (_, ()) = ctx
        .client
        .post(
            &format!("/v1/quests/{quest}/release"),
            &LeaseRequest { lease_id: lease },
        )
        .await
        .map_err(forgotten_quest)?;
    let released = held.clone();
    held.quest_id = None;
    held.lease_id = None;
    save(ctx, &held)?;
    Ok(released)
}

/// The session this agent works on, with its counts.
pub async fn session(ctx: &Ctx) -> Result<Session, CliError> {
    let id = ctx.agent_session()?;
    ctx.client
        .get(&format!("/v1/sessions/{id}"))
        .await
        .map_err(|e| forgotten_session(ctx, id, e))
}

/// What the session says once `next` answered finished: finished, or how many
/// quests wait for a person (no claim either way when the counts cannot be read).
pub async fn done_words(ctx: &Ctx) -> String {
    match session(ctx).await {
        Ok(s) => crate::domain::backlog::agents_done(s.status.review),
        Err(_) => crate::domain::backlog::AGENTS_DONE.to_owned(),
    }
}

/// A 404 for the session this agent remembers from its last lease (none was
/// given): the server does not know it, so the agent needs to be told one.
fn forgotten_session(ctx: &Ctx, session: SessionId, e: CliError) -> CliError {
    match e {
        CliError::Refused { status, code, .. }
            if status == reqwest::StatusCode::NOT_FOUND && ctx.given_session().is_none() =>
        {
            CliError::Refused {
                status,
                code,
                message: format!(
                    "the server does not know session {session}, the one of this agent's last lease (another \
                     server or a new data dir); set QUEST_SESSION to the id of the session the operator gave you"
                ),
            }
        }
        other => other,
    }
}

/// A 404 for the quest this agent remembers: the server does not know it (a new
/// data dir, another server), so the remembered lease is stale.
fn forgotten_quest(e: CliError) -> CliError {
    match e {
        CliError::Refused { status, .. } if status == reqwest::StatusCode::NOT_FOUND => CliError::Refused {
            status,
            code: super::client::QUEST_UNKNOWN.into(),
            message: "the server does not know the quest this agent remembers (another server or a new data dir)"
                .into(),
        },
        other => other,
    }
}

/// What an answer that a recorded submission gave (`replayed`) adds for the
/// agent while the quest is still its own.
pub const REPLAYED_NOTE: &str = "This is the verdict the server had already recorded for this very submit \
    (a retry of it), so nothing was checked again and no try was used. Sending the same result again as a new \
    submit is checked again and uses a try: change the result according to the facts.";

/// The exit status for a verdict and the quest's state after it.
pub fn verdict_status(verdict: SubmissionVerdict, state: State) -> u8 {
    use super::exit;
    match (verdict, state) {
        (SubmissionVerdict::Pending, _) => exit::PENDING,
        (SubmissionVerdict::Pass, _) => exit::OK,
        (SubmissionVerdict::Review, _) => exit::REVIEW,
        (SubmissionVerdict::Fail, State::Done) => exit::DONE,
        (SubmissionVerdict::Fail, _) => exit::FAIL,
    }
}

/// A verdict as the agent reads it: what happened, what to do, every fact with its hint.
pub fn verdict_text(
    surface: Surface,
    verdict: SubmissionVerdict,
    state: State,
    tries_left: Option<u32>,
    facts: &[Fact],
) -> String {
    let (next, submit) = (surface.next(), surface.submit());
    let go = format!("{} {next}", surface.verb());
    let mut out = match (verdict, state) {
        (SubmissionVerdict::Pass, State::Pass) => {
            format!("PASS: the quest is accepted and locked. {go}.")
        }
        (SubmissionVerdict::Pass, _) => format!(
            "PASS: the gate accepted it; AI verifiers take a last look. The quest is no longer yours: {}.",
            go.to_lowercase()
        ),
        (SubmissionVerdict::Review, _) => {
            format!("REVIEW: a person will decide this quest. {go}.")
        }
        (SubmissionVerdict::Fail, State::Done) => {
            format!("DONE: out of tries; the quest is closed. {go}.")
        }
        (SubmissionVerdict::Fail, _) => {
            let left = tries_left
                .map(|n| match n {
                    1 => " 1 try left.".to_owned(),
                    n => format!(" {n} tries left."),
                })
                .unwrap_or_default();
            let again = match surface {
                Surface::Cli => format!("{submit} again"),
                Surface::Mcp => format!("call {submit} again"),
            };
            format!("FAIL:{left} Fix each fact below, then {again}:")
        }
        (SubmissionVerdict::Pending, _) => "PENDING: the gate needs longer to decide.".to_owned(),
    };
    out.push_str(&facts_text(facts));
    out
}

/// One line per fact and one per hint, each line starting with a newline.
pub fn facts_text(facts: &[Fact]) -> String {
    let mut out = String::new();
    for f in facts {
        let field = if f.field.is_empty() {
            String::new()
        } else {
            format!(" {}", f.field)
        };
        out.push_str(&format!(
            "\n  - {}{field}: expected {}, found {}\n    hint: {}",
            f.check, f.expected, f.actual, f.hint
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_map_to_the_documented_exit_statuses() {
        use SubmissionVerdict::*;
        assert_eq!(verdict_status(Pass, State::Pass), 0);
        assert_eq!(
            verdict_status(Pass, State::Todo),
            0,
            "PASS while AI verifiers still look"
        );
        assert_eq!(verdict_status(Fail, State::Todo), 1);
        assert_eq!(verdict_status(Review, State::Review), 2);
        assert_eq!(verdict_status(Fail, State::Done), 3);
        assert_eq!(verdict_status(Pending, State::Todo), 4);
    }

    #[test]
    fn a_fail_names_the_next_step_of_its_surface_and_every_fact() {
        let facts = [Fact::new(
            "schema",
            "/email",
            "a string containing @",
            "\"nope\"",
            "send an address",
        )];
        let cli = verdict_text(
            Surface::Cli,
            SubmissionVerdict::Fail,
            State::Todo,
            Some(2),
            &facts,
        );
        assert!(
            cli.starts_with("FAIL: 2 tries left. Fix each fact below, then `quest submit` again:"),
            "{cli}"
        );
        assert!(
            cli.contains("schema /email: expected a string containing @, found \"nope\""),
            "{cli}"
        );
        assert!(cli.contains("hint: send an address"), "{cli}");
        let mcp = verdict_text(
            Surface::Mcp,
            SubmissionVerdict::Pass,
            State::Pass,
            Some(2),
            &[],
        );
        assert_eq!(
            mcp,
            "PASS: the quest is accepted and locked. Call quest_next."
        );
    }
}
