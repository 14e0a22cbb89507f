//! The HTTP layer: the router, its shared state, the error body and the
//! extractors. One file per resource; handlers extract, call one use case and
//! map the result. No SQL and no gate logic here.

mod access_log;
mod agents;
mod document;
pub mod error;
pub mod extract;
mod gold;
mod ops;
mod pauses;
mod quality;
mod quests;
mod review;
mod serve;
mod sessions;
mod tokens;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request, StatusCode};
use axum::response::IntoResponse;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

pub use self::serve::{ConnectionLimits, serve};

use self::error::ApiError;
use crate::service::Service;

/// Requests bodies may be this large, except a scan: room for the largest
/// result a session may allow (`max_result_bytes`, 1 MiB at most) and its
/// envelope.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;
/// A scan's body may be this large.
pub const SCAN_BODY_LIMIT: usize = 64 * 1024 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub service: Arc<Service>,
    pub metrics: PrometheusHandle,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "quest",
        description = "Takes the word \"done\" away from AI agents: agents lease quests, a deterministic gate decides.",
        license(name = "MIT", identifier = "MIT"),
    ),
    components(schemas(
        crate::domain::QuestEvent,
        crate::gates::schema::Params,
        crate::gates::email::Params,
        crate::gates::command::Params,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "sessions", description = "Scan a table, follow its progress, export it"),
        (name = "agents", description = "The agent loop: next, submit, heartbeat, release"),
        (name = "quests", description = "Quests and submissions with their history"),
        (name = "review", description = "The human review queue"),
        (name = "tokens", description = "API tokens and roles"),
        (name = "ops", description = "Health, readiness and metrics"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The answers any operation may get whatever it is asked: 500 when the server
/// fails, 503 when the database is unavailable, and 408 past the request
/// timeout (scans have none), so that the document lists every status sent.
struct ServerRefusals;

/// Operations outside the request timeout (the scan router).
const UNTIMED: [&str; 2] = ["create_session", "list_sessions"];

/// A refusal in the error body.
fn refusal(description: &str) -> utoipa::openapi::RefOr<utoipa::openapi::Response> {
    use utoipa::openapi::{Ref, RefOr, ResponseBuilder, content::ContentBuilder};
    let body = ContentBuilder::new()
        .schema(Some(RefOr::Ref(Ref::from_schema_name("ErrorBody"))))
        .build();
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", body)
            .build(),
    )
}

impl utoipa::Modify for ServerRefusals {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let untimed = operation
                    .operation_id
                    .as_deref()
                    .is_some_and(|id| UNTIMED.contains(&id));
                let responses = &mut operation.responses.responses;
                if !untimed {
                    responses.entry("408".into()).or_insert_with(|| {
                        refusal("The request took longer than the server waits")
                    });
                }
                responses
                    .entry("500".into())
                    .or_insert_with(|| refusal("The server failed; the message says nothing more"));
                responses.entry("503".into()).or_insert_with(|| {
                    refusal("The database is unavailable (or, for an export, every export slot is taken)")
                });
            }
        }
    }
}

fn api_router() -> OpenApiRouter<AppState> {
    let scan = OpenApiRouter::new()
        .routes(routes!(sessions::create_session, sessions::list_sessions))
        .layer(DefaultBodyLimit::max(SCAN_BODY_LIMIT));
    let rest = OpenApiRouter::new()
        .routes(routes!(sessions::get_session))
        .routes(routes!(sessions::get_status))
        .routes(routes!(sessions::start_recheck))
        .routes(routes!(sessions::get_source))
        .routes(routes!(sessions::stream_events))
        .routes(routes!(sessions::export_session))
        .routes(routes!(pauses::list_pauses))
        .routes(routes!(pauses::resume_token))
        .routes(routes!(quests::lease_next))
        .routes(routes!(quests::submit_result))
        .routes(routes!(quests::heartbeat))
        .routes(routes!(quests::release))
        .routes(routes!(agents::get_agent_lease))
        .routes(routes!(agents::list_session_agents))
        .routes(routes!(quests::get_quest))
        .routes(routes!(quests::get_submission))
        .routes(routes!(review::list_review_queue))
        .routes(routes!(review::claim_review, review::release_review))
        .routes(routes!(review::decide_review))
        .routes(routes!(review::list_verifiers))
        .routes(routes!(review::get_session_reviewers))
        .routes(routes!(quality::get_session_quality))
        .routes(routes!(gold::add_gold_items, gold::get_session_gold))
        .routes(routes!(quality::draw_audits, quality::list_pending_audits))
        .routes(routes!(quality::decide_audit))
        .routes(routes!(tokens::create_token, tokens::list_tokens))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::create_backup))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Scans are left out: a large upload may take long, and a timeout must not
        // answer while the scan still commits.
        .layer(axum::middleware::from_fn(request_timeout));
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(scan)
        .merge(rest)
}

/// Longest a request may take before its answer starts (a submit waits at most 300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(330);

/// Answers 408 in the error body when a request takes too long.
async fn request_timeout(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request took too long; retry it",
        )
        .into_response(),
    }
}

/// The OpenAPI document of this build.
pub fn openapi() -> utoipa::openapi::OpenApi {
    split().1
}

/// The routes and their document, with the refusals every operation may get.
fn split() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use utoipa::Modify;
    let (api, mut doc) = api_router().split_for_parts();
    // Applied here, not in `#[openapi(modifiers)]`: that runs before any route is added.
    ServerRefusals.modify(&mut doc);
    (api, document::conform(doc))
}

/// The full router: the API, its document at `/openapi.json`, docs at `/docs`,
/// and the web console under `/ui`. A request slower than `slow` (beyond its
/// own wait) is logged at INFO; see [`access_log`].
pub fn router(state: AppState, slow: Duration) -> Router {
    let (api, doc) = split();
    let request_id = HeaderName::from_static("x-request-id");
    api.merge(SwaggerUi::new("/docs").url("/openapi.json", doc))
        .merge(ui::router())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such route; the API is described at /docs",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method; see /docs",
            )
        })
        .with_state(state)
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn(move |request, next| {
            access_log::log(slow, request, next)
        }))
        // The span carries the request id into every line a request logs; its own line is access_log's.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<_>| {
                    let id = req
                        .headers()
                        .get("x-request-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-");
                    tracing::info_span!("request", request_id = %id)
                })
                .on_request(())
                .on_response(())
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}
