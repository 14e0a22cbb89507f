//! The web console under `/ui`: server-rendered pages (minijinja, HTML
//! auto-escaping on), its style sheet and script embedded in the binary, and
//! a Content-Security-Policy that allows nothing but this origin. A token
//! signs a browser in ([`auth`]); its role rules the console as it rules the
//! API. One file per page; handlers read through the service and render.

mod assets;
mod auth;
mod bulk;
mod chart;
mod dashboard;
mod events;
mod login;
mod pauses;
mod quest;
mod review;
mod review_page;
mod scope;
mod session;
mod session_page;
mod templates;
mod view;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
use super::error::ApiError;
use crate::service::ServiceError;
use crate::store::StoreError;

/// The policy of every console response: this origin only, no inline script or style.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; font-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// Console forms are small; a bulk decision lists at most 500 ids.
const FORM_LIMIT: usize = 64 * 1024;

/// The console's routes, and `/` sending visitors to it.
pub fn router() -> Router<AppState> {
    let pages = Router::new()
        .route("/", get(dashboard::page))
        .route("/login", get(login::form).post(login::sign_in))
        .route("/logout", post(login::sign_out))
        .route("/events", get(events::stream))
        .route("/sessions/{id}", get(session::page))
        .route("/sessions/{id}/export", get(session::export))
        .route(
            "/sessions/{id}/tokens/{token_id}/resume",
            post(pauses::resume),
        )
        .route("/quests/{id}", get(quest::page))
        .route("/review", get(review::page))
        .route("/review/bulk", get(bulk::confirm).post(bulk::decide))
        .route("/review/{id}/decide", post(review::decide))
        .route("/review/{id}/release", post(review::release))
        .route("/review/{id}/undo", post(review::undo))
        .route("/assets/{name}", get(assets::serve))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            PageError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Not allowed",
                "This page does not take that method.",
            )
        })
        .layer(DefaultBodyLimit::max(FORM_LIMIT))
        .layer(middleware::from_fn(guard));
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .nest("/ui", pages)
}

async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path() == "/ui/" {
        return Redirect::to("/ui").into_response();
    }
    PageError::new(
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no such page in the console.",
    )
    .into_response()
}

/// Refuses a state-changing request from another site before any handler
/// runs, and puts the security headers on every console response.
async fn guard(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && auth::cross_site(request.headers()) {
        return PageError::new(
            StatusCode::FORBIDDEN,
            "Refused",
            "This form was sent from another site. Open the console itself and try again.",
        )
        .into_response();
    }
    let is_asset = request.uri().path().starts_with("/ui/assets/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with the console's own forms.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !is_asset {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// `axum::extract::Query`, refusing with an error page.
pub struct PageQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| PageQuery(q.0))
            .map_err(|e| {
                PageError::bad_request(format!(
                    "The address has a bad parameter: {}",
                    e.body_text()
                ))
            })
    }
}

/// `axum::extract::Path`, refusing with an error page.
pub struct PagePath<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PagePath<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PagePath(p.0))
            .map_err(|_| {
                PageError::new(
                    StatusCode::NOT_FOUND,
                    "Not found",
                    "That address names no such page: ids are UUIDs.",
                )
            })
    }
}

/// A page that could not be shown: an error page, or the way to sign in.
#[derive(Debug)]
pub enum PageError {
    /// Not signed in: go to the sign-in page, then back to `next`.
    SignIn { next: String },
    /// An error page with a status.
    Page {
        status: StatusCode,
        title: &'static str,
        message: String,
    },
}

impl PageError {
    /// An error page.
    pub fn new(status: StatusCode, title: &'static str, message: impl Into<String>) -> Self {
        PageError::Page {
            status,
            title,
            message: message.into(),
        }
    }

    /// 400 for a request the console cannot read.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad request", message)
    }
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        let title = match e.status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::CONFLICT => "Conflict",
            StatusCode::FORBIDDEN => "Not allowed",
            s if s.is_server_error() => "Something went wrong",
            _ => "Cannot do that",
        };
        // ApiError has logged a server fault already and says nothing of its cause.
        PageError::new(e.status, title, e.message)
    }
}

impl From<ServiceError> for PageError {
    fn from(e: ServiceError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        ApiError::from(e).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::SignIn { next } => {
                let to = format!("/ui/login?next={}", view::query_escape(&next));
                Redirect::to(&to).into_response()
            }
            PageError::Page {
                status,
                title,
                message,
            } => {
                let body = templates::render(
                    "error.html",
                    minijinja::context! { me => (), title, message => message.clone(), status => status.as_u16() },
                );
                match body {
                    Ok(html) => (status, html).into_response(),
                    Err(_) => (status, message).into_response(),
                }
            }
        }
    }
}
