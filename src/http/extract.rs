//! Extractors: axum's own, wrapped so that their refusals use the error body,
//! and [`Principal`], the authenticated caller.

use crate::domain::ids::{QuestId, SessionId, SubmissionId, TokenId};
use crate::domain::pause::in_scope;
use crate::domain::review::Viewer;
use axum::extract::{FromRequest, FromRequestParts};
use axum::extract::{MatchedPath, RawPathParams};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use super::AppState;
use super::error::ApiError;
use std::marker::PhantomData;

use crate::domain::replay::IdempotencyKey;
use crate::domain::work::{AgentId, ReviewerId};
use crate::domain::{Permission, Role, text, token_hash};
use crate::service::ServiceError;
use crate::store::StoreError;

/// `axum::Json` with refusals in the error body, and no text the store
/// cannot keep: a body with a NUL (`\u0000`) in any string or member name
/// is refused with 422 `invalid_text` naming its JSON pointer, before
/// anything reads it.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::Bytes::from_request(
            axum::extract::Request::from_parts(parts.clone(), body),
            state,
        )
        .await?;
        // A NUL can only arrive escaped; most bodies never spell one, and
        // only those that do are read twice.
        if bytes.windows(6).any(|w| w == b"\\u0000")
            && let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && let Some(pointer) = text::nul_pointer(&value)
        {
            return Err(invalid_text(&format!("the body's `{pointer}`")));
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
        let axum::Json(value) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Json(value))
    }
}

/// 422 `invalid_text`: `place` holds a NUL.
pub fn invalid_text(place: &str) -> ApiError {
    ApiError::invalid(
        "invalid_text",
        format!(
            "{place} holds U+0000 (NUL), which the server cannot store; remove it and send again"
        ),
    )
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Path` with refusals in the error body.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// `axum::extract::Query` with refusals in the error body; a parameter
/// holding a NUL (`%00`) is refused with 422 `invalid_text` naming it.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(query) = parts.uri.query()
            && let Some((name, _)) = url::form_urlencoded::parse(query.as_bytes())
                .find(|(name, value)| text::has_nul(name) || text::has_nul(value))
        {
            return Err(invalid_text(&format!(
                "the query parameter `{}`",
                text::clean(&name)
            )));
        }
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Query(value))
    }
}

/// The optional `Idempotency-Key` header of a submit, parsed: anything but
/// one header of 1 to 255 printable ASCII characters is refused with 400
/// `invalid_idempotency_key` (a NUL or other control character is refused by
/// the HTTP parser itself, also with 400).
#[derive(Debug, Clone)]
pub struct IdempotencyKeyHeader(pub Option<IdempotencyKey>);

/// The header's name.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKeyHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let mut values = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return if parts.headers.contains_key(IDEMPOTENCY_KEY) {
                Err(bad_key("send one Idempotency-Key header, not several"))
            } else {
                Ok(IdempotencyKeyHeader(None))
            };
        };
        IdempotencyKey::parse(value.as_bytes())
            .map(|key| IdempotencyKeyHeader(Some(key)))
            .map_err(|e| bad_key(&e.to_string()))
    }
}

fn bad_key(message: &str) -> ApiError {
    ApiError::bad_request("invalid_idempotency_key", message)
}

/// The caller, authenticated by its bearer token.
#[derive(Debug, Clone)]
pub struct Principal {
    pub token_id: TokenId,
    pub name: String,
    pub role: Role,
    /// The SHA-256 of the bearer secret (never the secret): how a long
    /// request, such as an event stream, looks its token up again.
    pub token_hash: String,
    /// The sessions the token is limited to; `None`: every session.
    pub sessions: Option<Vec<SessionId>>,
    /// A reviewer token that adjudicates.
    pub adjudicate: bool,
}

impl Principal {
    /// Who asks, as the review's visibility rules see it.
    pub fn viewer(&self) -> Viewer {
        Viewer {
            token: self.token_id,
            role: self.role,
            adjudicate: self.adjudicate,
        }
    }

    /// The identity of a reviewer: this token under its name.
    pub fn reviewer(&self) -> ReviewerId {
        ReviewerId::new(self.token_id, self.name.clone())
    }

    /// The identity of an agent: this token plus the name the agent chose.
    pub fn agent(&self, name: Option<&str>) -> AgentId {
        AgentId::new(
            self.token_id,
            name.filter(|n| !n.is_empty()).unwrap_or(&self.name),
        )
    }
}

/// What a route needs the caller to be allowed to do.
pub trait Need: Send + Sync + 'static {
    const PERMISSION: Permission;
    /// How the refusal names the roles that would do.
    const ROLES: &'static str;
}

/// Any role: reading.
pub struct Read;
/// `agent` or `admin`: working quests.
pub struct Work;
/// `reviewer` or `admin`: deciding REVIEW quests.
pub struct Review;
/// `admin`: scans and tokens.
pub struct Administer;

impl Need for Read {
    const PERMISSION: Permission = Permission::Read;
    const ROLES: &'static str = "any role";
}
impl Need for Work {
    const PERMISSION: Permission = Permission::Work;
    const ROLES: &'static str = "the `agent` or `admin` role";
}
impl Need for Review {
    const PERMISSION: Permission = Permission::Review;
    const ROLES: &'static str = "the `reviewer` or `admin` role";
}
impl Need for Administer {
    const PERMISSION: Permission = Permission::Administer;
    const ROLES: &'static str = "the `admin` role";
}

/// An authenticated caller whose role allows `N`. As a request-parts extractor it
/// runs before any body is read, so a wrong role is refused before parsing.
pub struct Caller<N: Need>(pub Principal, PhantomData<N>);

impl<N: Need> std::ops::Deref for Caller<N> {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.0
    }
}

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let unauthorized =
        |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
    let header = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
        unauthorized(
            "send `Authorization: Bearer <token>`; the admin token is in <data-dir>/admin.token",
        )
    })?;
    let secret = header
        .to_str()
        .ok()
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <token>`"))?;
    match state.service.find_token(&token_hash(secret)).await? {
        Some(t) => Ok(Principal {
            token_id: t.id,
            name: t.name,
            role: t.role,
            token_hash: t.hash,
            sessions: t.sessions,
            adjudicate: t.adjudicate,
        }),
        None => Err(unauthorized(
            "the token is unknown or revoked; ask an admin for a valid one",
        )),
    }
}

impl<N: Need> FromRequestParts<AppState> for Caller<N> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let principal = authenticate(parts, state).await?;
        if !principal.role.allows(N::PERMISSION) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this needs {}; your token `{}` has the `{}` role",
                    N::ROLES,
                    principal.name,
                    principal.role
                ),
            ));
        }
        // An agent's own work is never refused for the session's gold: its
        // hot path looks nothing up for that.
        let template = parts.extensions.get::<MatchedPath>().map(|m| m.as_str());
        let beyond_work = template.is_none_or(|t| !AGENT_WORK[..7].contains(&t));
        if principal.sessions.is_some() || (principal.role == Role::Agent && beyond_work) {
            let named = named_sessions(parts, state).await?;
            if let Some(scope) = principal.sessions.as_deref() {
                check_scope(&named, scope)?;
            }
            if principal.role == Role::Agent {
                check_agent_work(parts, state, &principal, &named).await?;
            }
        }
        Ok(Caller(principal, PhantomData))
    }
}

/// What a request names, for the rules on who may see what: the sessions
/// in its `session` query parameters and the one its path names (through a
/// quest, a review of one or a submission), and whether it is a list that
/// would span sessions without naming one (`/v1/verifiers`, `/v1/review`).
/// An id that does not parse or exist is left to the handler (400, 404).
struct Named {
    template: String,
    queried: Vec<SessionId>,
    path: Option<SessionId>,
    unnamed_list: bool,
    submission: Option<SubmissionId>,
}

impl Named {
    fn sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.queried.iter().copied().chain(self.path)
    }
}

async fn named_sessions(parts: &mut Parts, state: &AppState) -> Result<Named, ApiError> {
    let template = parts
        .extensions
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let queried: Vec<SessionId> =
        url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .filter(|(k, _)| k == "session")
            .filter_map(|(_, v)| v.parse::<SessionId>().ok())
            .collect();
    let unnamed_list =
        queried.is_empty() && (template == "/v1/verifiers" || template == "/v1/review");
    let params = RawPathParams::from_request_parts(parts, state).await.ok();
    let id = params.as_ref().and_then(|ps| {
        ps.iter()
            .find(|(k, _)| *k == "id" || *k == "quest_id")
            .map(|(_, v)| v.to_owned())
    });
    let service = &state.service;
    let mut submission = None;
    let path = match id {
        None => None,
        Some(id) if template.starts_with("/v1/sessions/{id}") => id.parse::<SessionId>().ok(),
        Some(id)
            if template.starts_with("/v1/quests/{id}")
                || template.starts_with("/v1/review/{quest_id}")
                || template.starts_with("/v1/audits/{quest_id}") =>
        {
            match id.parse::<QuestId>() {
                Ok(q) => service.quest_session(q).await.ok(),
                Err(_) => None,
            }
        }
        Some(id) if template.starts_with("/v1/submissions/{id}") => {
            submission = id.parse::<SubmissionId>().ok();
            match submission {
                Some(s) => service.submission_session(s).await.ok(),
                None => None,
            }
        }
        Some(_) => None,
    };
    Ok(Named {
        template,
        queried,
        path,
        unnamed_list,
        submission,
    })
}

/// Refuses a token limited to `scope` anything outside it, before the
/// handler runs. Lists that would span sessions without naming one must name one.
fn check_scope(named: &Named, scope: &[SessionId]) -> Result<(), ApiError> {
    let out_of_scope = |what: &str| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "out_of_scope",
            format!(
                "this token is limited to its sessions ({}); {what} is outside them: use a session it is \
                 limited to, or ask an admin for a token of that session",
                scope
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    };
    if let Some(id) = named.sessions().find(|s| !in_scope(Some(scope), *s)) {
        return Err(out_of_scope(&format!("session {id}")));
    }
    if named.unnamed_list {
        return Err(out_of_scope("every session at once")
            .with_message_suffix(" (name one with `?session=<id>`)"));
    }
    Ok(())
}

/// What an agent-role token may do in a session with known answers: its
/// own work only (the last, a submission, must be its own). Anything more (the source, the export, the events, other
/// quests, the config, the console) would let it tell gold quests apart.
const AGENT_WORK: [&str; 8] = [
    "/v1/sessions/{id}/next",
    "/v1/sessions/{id}/status",
    "/v1/sessions/{id}/lease",
    "/v1/quests/{id}/submit",
    "/v1/quests/{id}/heartbeat",
    "/v1/quests/{id}/release",
    // The session as an agent sees it there: no gold settings, its status reduced.
    "/v1/sessions/{id}",
    "/v1/submissions/{id}",
];

/// Refuses an agent-role token what lies beyond its own work in a session
/// with gold (a submission must be its own).
async fn check_agent_work(
    parts: &Parts,
    state: &AppState,
    principal: &Principal,
    named: &Named,
) -> Result<(), ApiError> {
    let service = &state.service;
    let mut gold = false;
    for session in named.sessions() {
        // A check that cannot read refuses rather than letting the request through.
        gold |= match service.has_gold(session).await {
            Ok(g) => g,
            Err(ServiceError::Store(StoreError::NotFound(_))) => false,
            Err(e) => return Err(e.into()),
        };
    }
    if !gold {
        return Ok(());
    }
    let refuse = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "needs_viewer",
            format!(
                "this session measures its agents with known answers, so an agent token may only \
                 lease, submit, heartbeat, release and read its own lease, submissions and the \
                 session's remaining count; `{} {}` needs a viewer token or above",
                parts.method, named.template
            ),
        )
    };
    if !AGENT_WORK.contains(&named.template.as_str()) {
        return Err(refuse());
    }
    if let Some(id) = named.submission
        && service.submission_token(id).await.ok() != Some(principal.token_id)
    {
        return Err(refuse());
    }
    Ok(())
}

/// A JSON body that may be left out entirely: an empty body is `T::default()`.
#[derive(Debug)]
pub struct OptionalJson<T>(pub T);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = req.headers();
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let has_body =
            length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING);
        if !has_body {
            return Ok(OptionalJson(T::default()));
        }
        // A body is there: it must be JSON, with its content type (else 415).
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(OptionalJson(value))
    }
}
