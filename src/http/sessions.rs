//! Sessions: scan, list, read, status, events, export and the uploaded source.

use crate::domain::Role;
use crate::domain::ids::SessionId;
use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio_stream::wrappers::BroadcastStream;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{CreateSessionRequest, ErrorBody, ExportQuery, RecheckRun, Session, Status};
use crate::domain::session::SessionConfig;
use crate::domain::table::ItemsJsonl;
use crate::export::ExportFormat;
use crate::service::{Export, Upload};

/// The body of a scan: JSON, or multipart with `file` and `config`.
pub struct ScanBody {
    config: Value,
    upload: Upload,
}

/// The multipart form of a scan (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[expect(dead_code, reason = "documents the multipart form; never constructed")]
pub struct ScanForm {
    /// The table: .csv, .tsv, .xlsx, .jsonl or .txt.
    #[schema(format = Binary, content_media_type = "application/octet-stream")]
    file: String,
    /// The session config: a JSON part.
    config: SessionConfig,
}

/// A JSON scan as the server reads it: the items become JSONL text while the
/// body is parsed, so that a large body never becomes a tree of values.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScanJson {
    config: SessionConfig,
    items: ItemsJsonl,
}

impl<S: Send + Sync> FromRequest<S> for ScanBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_multipart = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("multipart/form-data"));
        if is_multipart {
            let form = Multipart::from_request(req, state)
                .await
                .map_err(|e| ApiError::bad_request("malformed_body", e.body_text()))?;
            return read_form(form).await;
        }
        let Json(body) = Json::<ScanJson>::from_request(req, state).await?;
        Ok(ScanBody {
            config: serde_json::to_value(body.config).map_err(ApiError::internal)?,
            upload: Upload {
                name: "items.jsonl".into(),
                bytes: body.items.0.into_bytes(),
            },
        })
    }
}

/// The `config` and `file` parts of a multipart scan.
async fn read_form(mut form: Multipart) -> Result<ScanBody, ApiError> {
    let (mut config, mut file) = (None, None);
    while let Some(field) = form.next_field().await? {
        match field.name() {
            Some("config") => config = Some(config_part(&field.text().await?)?),
            Some("file") => {
                let name = field.file_name().unwrap_or("upload").to_owned();
                file = Some(Upload {
                    name,
                    bytes: Vec::from(field.bytes().await?),
                });
            }
            other => {
                return Err(ApiError::bad_request(
                    "malformed_body",
                    format!(
                        "unexpected form part `{}`: send `file` and `config` only",
                        other.unwrap_or("")
                    ),
                ));
            }
        }
    }
    let config = config.ok_or_else(|| {
        ApiError::invalid(
            "missing_config",
            "add a `config` part with the session config JSON",
        )
    })?;
    let upload =
        file.ok_or_else(|| ApiError::invalid("missing_file", "add a `file` part with the table"))?;
    Ok(ScanBody { config, upload })
}

fn config_part(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(
            "malformed_config",
            format!("the `config` part is not valid JSON: {e}"),
        )
    })
}

/// Creates a session from a table (a scan). All or nothing.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", operation_id = "create_session",
    request_body(content(
        (CreateSessionRequest = "application/json"),
        (ScanForm = "multipart/form-data"),
    )),
    responses(
        (status = 201, description = "The session is created, with a quest per row", body = Session),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
pub async fn create_session(
    State(state): State<AppState>,
    caller: Caller<Administer>,
    body: ScanBody,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    let session = state
        .service
        .create_session(&caller.name, body.config, body.upload)
        .await?;
    Ok((StatusCode::CREATED, Json(session)))
}

/// Starts a re-check of the session's PASS quests: each one's gate runs again
/// on its accepted result. A re-check never unlocks a quest; it marks it
/// `stale` or `unconfirmed`, or clears the mark (see the quest's `rechecks`).
#[utoipa::path(post, path = "/v1/sessions/{id}/recheck", tag = "sessions", operation_id = "start_recheck",
    params(("id" = Uuid, Path, description = "Session id")),
    responses(
        (status = 202, body = RecheckRun, description = "The run started; status shows its progress"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The session has no PASS quest (`nothing_to_recheck`) or a run of it is unfinished (`recheck_running`)"),
    ))]
pub async fn start_recheck(
    State(state): State<AppState>,
    caller: Caller<Administer>,
    Path(id): Path<SessionId>,
) -> Result<(StatusCode, Json<RecheckRun>), ApiError> {
    let run = state.service.start_recheck(id, &caller.name).await?;
    Ok((StatusCode::ACCEPTED, Json(run)))
}

/// Lists sessions, newest first: for a token limited to sessions, only those.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", operation_id = "list_sessions",
    responses((status = 200, description = "The sessions this token may see", body = Vec<Session>), (status = 401, body = ErrorBody)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    caller: Caller<Read>,
) -> Result<Json<Vec<Session>>, ApiError> {
    Ok(Json(
        state
            .service
            .list_sessions(caller.sessions.as_deref(), caller.role)
            .await?,
    ))
}

/// One session with its status.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", operation_id = "get_session",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session and its configuration", body = Session), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_session(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<Session>, ApiError> {
    let mut session = state.service.get_session(id).await?;
    if caller.role == Role::Agent && session.config.gold.is_some() {
        // An agent of a session with gold sees neither the gold settings nor the full figures.
        session.config.gold = None;
        session.status = state.service.agent_status(id).await?;
    }
    Ok(Json(session))
}

/// Counts and progress of a session.
#[utoipa::path(get, path = "/v1/sessions/{id}/status", tag = "sessions", operation_id = "get_session_status",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's counts and progress", body = Status), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_status(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<Status>, ApiError> {
    if caller.role == Role::Agent && state.service.has_gold(id).await? {
        return Ok(Json(state.service.agent_status(id).await?));
    }
    let mut status = state.service.get_session_status(id).await?;
    status.quality = Some(state.service.get_session_quality(id).await?);
    Ok(Json(status))
}

/// The uploaded file, byte for byte, streamed from the database piece by piece.
#[utoipa::path(get, path = "/v1/sessions/{id}/source", tag = "sessions", operation_id = "get_session_source",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The uploaded bytes, with the media type of the upload's format", content(
            (Vec<u8> = "text/csv"),
            (Vec<u8> = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
            (Vec<u8> = "application/x-ndjson"),
            (Vec<u8> = "text/plain; charset=utf-8"),
        )),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_source(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Response, ApiError> {
    let source = state.service.get_session_source(id).await?;
    let mut response = attachment(
        &source.media_type,
        &source.name,
        Body::from_stream(source.body),
    );
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, source.size.into());
    Ok(response)
}

pub(super) fn attachment(media_type: &str, file_name: &str, body: Body) -> Response {
    let safe: String = file_name
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .collect();
    (
        [
            (header::CONTENT_TYPE, media_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{safe}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// Server-Sent Events: one event per state change of the session. The stream
/// ends within about a second when its token is revoked, with a last
/// `revoked` event whose data is the error body.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "sessions", operation_id = "stream_session_events",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "An event stream; each event's name is its kind and its data a QuestEvent. \
        When the token is revoked the stream ends, within about a second, after a `revoked` event whose data is an ErrorBody", content_type = "text/event-stream"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn stream_events(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    state.service.get_session(id).await?;
    // The stream ends when the server stops, so that a watcher cannot hold
    // shutdown up, and when its token is revoked, so that a revoked token
    // reads nothing more.
    let (ended, why) = tokio::sync::oneshot::channel();
    let service = state.service.clone();
    let end = async move {
        let revoked = tokio::select! {
            _ = service.shutdown().cancelled() => false,
            _ = service.token_revoked(&caller.token_hash) => true,
        };
        let _ = ended.send(revoked);
    };
    let last = futures_util::stream::once(why).filter_map(|revoked| async move {
        let body = ErrorBody {
            error: crate::api::ErrorDetail {
                code: "token_revoked".into(),
                message: "the token of this stream was revoked; ask an admin for a valid token"
                    .into(),
                details: None,
            },
        };
        let event = Event::default().event("revoked").json_data(body).ok()?;
        matches!(revoked, Ok(true)).then_some(Ok(event))
    });
    let events = BroadcastStream::new(state.service.subscribe()).filter_map(move |e| async move {
        match e {
            Ok(e) if e.session_id == id => Some(Ok(Event::default()
                .event(serde_json::to_value(e.kind).ok()?.as_str()?)
                .json_data(&e)
                .ok()?)),
            Ok(_) => None,
            // A slow reader missed events: say so, so it can re-read the status.
            Err(_) => Some(Ok(Event::default().event("lagged").data("{}"))),
        }
    });
    Ok(Sse::new(events.take_until(end).chain(last)).keep_alive(KeepAlive::default()))
}

/// The original rows, in order, with the quest columns added.
#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "sessions", operation_id = "export_session",
    params(("id" = Uuid, Path, description = "Session id"), ExportQuery),
    responses((status = 200, description = "The export file in the requested format", headers(
            ("X-Quest-Error-Bound" = String, description = "At most this share of the PASS rows is wrong (one-sided 95% Clopper-Pearson on the random audits), with what it rests on: `0.009936; confidence=0.95; audited=300; errors=0`; `not-measured` before any audit is decided. `GET /v1/sessions/{id}/quality` gives every figure.")),
        content(
            (Vec<u8> = "text/csv; charset=utf-8"),
            (Vec<u8> = "application/x-ndjson"),
            (Vec<u8> = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        )),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "As many exports run as the server allows at once (`exports_busy`), or as this token may (`token_exports_busy`: two)",
            headers(("Retry-After" = u32, description = "Seconds to wait before asking again")))))]
pub async fn export_session(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Path(id): Path<SessionId>,
    Query(query): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    let requested = query.format.as_deref().unwrap_or("csv");
    let format = ExportFormat::parse(requested).ok_or_else(|| {
        ApiError::invalid(
            "invalid_format",
            format!("unknown format `{requested}`: use csv, jsonl or xlsx"),
        )
    })?;
    let (media_type, ext) = format.media_type();
    let name = format!("session-{id}.{ext}");
    let (export, quality) = state
        .service
        .export_session(id, format, caller.token_id)
        .await?;
    let body = export_body(export);
    Ok(with_error_bound(
        attachment(media_type, &name, body),
        &quality,
    ))
}

/// An export with its error bound in `X-Quest-Error-Bound` (see
/// [`Quality::header`](crate::domain::quality::Quality::header)).
pub(super) fn with_error_bound(
    mut response: Response,
    quality: &crate::domain::quality::Quality,
) -> Response {
    let value =
        header::HeaderValue::from_str(&quality.header()).expect("the header is printable ASCII");
    response.headers_mut().insert("x-quest-error-bound", value);
    response
}

/// The body of an export, streamed whichever way it was built.
pub(super) fn export_body(export: Export) -> Body {
    match export {
        Export::File(file) => {
            let file = tokio::fs::File::from_std(file);
            Body::from_stream(tokio_util::io::ReaderStream::new(file))
        }
        Export::Stream(stream) => Body::from_stream(stream),
    }
}
