//! The console's one scope check, as [`crate::http::extract::Caller`] is the
//! API's: a browser signed in with a token limited to sessions is refused
//! (403) any page or form that names another session, or a quest of one,
//! before the handler runs. [`super::auth::Signed`] checks the address (its
//! path and query), [`super::auth::SignedForm`] the form's fields as well.
//! Lists that span sessions (the dashboard, the review queue, the event
//! stream without `?session=`) are narrowed to the scope by their use cases.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams};
use axum::http::StatusCode;
use axum::http::request::Parts;

use super::PageError;
use super::auth::Fields;
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::pause::in_scope;
use crate::http::AppState;
use crate::service::ServiceError;
use crate::store::StoreError;

/// Query parameters and form fields that name a session.
const SESSION_NAMES: &[&str] = &["session"];
/// Query parameters and form fields that name a quest: the review page's
/// quest to open, the one just skipped or decided, a bulk decision's list,
/// where a skip goes.
const QUEST_NAMES: &[&str] = &["quest", "last", "skip", "to"];

/// What a console address names in its path `{id}`.
enum PathId {
    Session,
    Quest,
}

/// The kind of id a route's `{id}` is, by its template.
fn path_id(template: &str) -> Option<PathId> {
    // Inside the nested router a template may or may not carry its `/ui`.
    let route = template.strip_prefix("/ui").unwrap_or(template);
    if route.starts_with("/sessions/{id}") {
        Some(PathId::Session)
    } else if route.starts_with("/quests/{id}") || route.starts_with("/review/{id}") {
        Some(PathId::Quest)
    } else {
        None
    }
}

/// What the address's path `{id}` names, and its text.
async fn path_target(parts: &mut Parts, state: &AppState) -> Option<(PathId, String)> {
    let template = parts.extensions.get::<MatchedPath>()?.as_str().to_owned();
    let kind = path_id(&template)?;
    let params = RawPathParams::from_request_parts(parts, state).await.ok()?;
    let id = params.iter().find(|(k, _)| *k == "id")?.1.to_owned();
    Some((kind, id))
}

/// Refuses the request when its path or query names a session outside
/// `scope`, or a quest of one. An id that does not parse or exist is left
/// to the handler (a 400 or 404 page).
pub async fn check_address(
    parts: &mut Parts,
    state: &AppState,
    scope: &[SessionId],
) -> Result<(), PageError> {
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let pairs = Fields::parse(query.as_bytes());
    check_named(state, scope, &pairs).await?;
    let Some((kind, id)) = path_target(parts, state).await else {
        return Ok(());
    };
    match kind {
        PathId::Session => match id.parse::<SessionId>() {
            Ok(s) => check_session(scope, s),
            Err(_) => Ok(()),
        },
        PathId::Quest => match id.parse::<QuestId>() {
            Ok(q) => check_quest(state, scope, q).await,
            Err(_) => Ok(()),
        },
    }
}

/// Refuses a form (or a query) whose fields name a session outside `scope`,
/// or a quest of one.
pub async fn check_named(
    state: &AppState,
    scope: &[SessionId],
    fields: &Fields,
) -> Result<(), PageError> {
    for value in SESSION_NAMES.iter().flat_map(|name| fields.all(name)) {
        if let Ok(s) = value.parse::<SessionId>() {
            check_session(scope, s)?;
        }
    }
    for value in QUEST_NAMES.iter().flat_map(|name| fields.all(name)) {
        if let Ok(q) = value.parse::<QuestId>() {
            check_quest(state, scope, q).await?;
        }
    }
    Ok(())
}

fn check_session(scope: &[SessionId], session: SessionId) -> Result<(), PageError> {
    if in_scope(Some(scope), session) {
        Ok(())
    } else {
        Err(out_of_scope())
    }
}

async fn check_quest(
    state: &AppState,
    scope: &[SessionId],
    quest: QuestId,
) -> Result<(), PageError> {
    match state.service.quest_session(quest).await {
        Ok(session) => check_session(scope, session),
        Err(ServiceError::Store(StoreError::NotFound(_))) => Ok(()),
        // A check that cannot read refuses, rather than letting the request through.
        Err(e) => Err(e.into()),
    }
}

/// The page a limited token gets outside its sessions.
pub fn out_of_scope() -> PageError {
    PageError::new(
        StatusCode::FORBIDDEN,
        "Out of scope",
        "This token is limited to other sessions: open one of its sessions, or sign in with a \
         token of this one.",
    )
}

/// Refuses an agent token any page of a session with known answers, or of
/// a quest of one: there it may only do its own work, through the API.
pub async fn check_agent(parts: &mut Parts, state: &AppState) -> Result<(), PageError> {
    let Some((kind, id)) = path_target(parts, state).await else {
        return Ok(());
    };
    let session = match kind {
        PathId::Session => id.parse::<SessionId>().ok(),
        PathId::Quest => match id.parse::<QuestId>() {
            Ok(q) => state.service.quest_session(q).await.ok(),
            Err(_) => None,
        },
    };
    let gold = match session {
        Some(s) => state.service.has_gold(s).await.unwrap_or(false),
        None => false,
    };
    if gold {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "Not allowed",
            "This session measures its agents with known answers, so an agent token does its own \
             work through the API only; sign in with a viewer token or above to see it.",
        ));
    }
    Ok(())
}
