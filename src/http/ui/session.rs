//! A session's page (`/ui/sessions/{id}`), its view model built in
//! [`super::session_page`], and the session's export for a signed-in browser.

use axum::extract::State;
use axum::response::{Html, Response};
use serde::Deserialize;

use super::auth::Signed;
use super::session_page::{self, Filter, TableQuery};
use super::{PageError, PagePath, PageQuery, templates};
use crate::domain::ids::SessionId;
use crate::export::ExportFormat;
use crate::http::extract::Read;
use crate::http::{AppState, sessions};

/// The session's page.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Read>,
    PagePath(id): PagePath<SessionId>,
    PageQuery(t): PageQuery<TableQuery>,
) -> Result<Html<String>, PageError> {
    let filter = Filter::parse(t)?;
    let overview = state.service.session_overview(id, &filter.query()).await?;
    let reviewers = state.service.get_session_reviewers(id).await?;
    let quality = state.service.get_session_quality(id).await?;
    let now = state.service.now();
    let page = session_page::build(id, filter, overview, reviewers, quality, now);
    templates::page("session.html", &signed.me, page)
}

/// The export's query.
#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
}

/// The session's export, as the API gives it, for a signed-in browser.
pub async fn export(
    State(state): State<AppState>,
    signed: Signed<Read>,
    PagePath(id): PagePath<SessionId>,
    PageQuery(q): PageQuery<ExportQuery>,
) -> Result<Response, PageError> {
    let requested = q.format.as_deref().unwrap_or("csv");
    let format = ExportFormat::parse(requested).ok_or_else(|| {
        PageError::bad_request(format!(
            "Unknown format `{requested}`: use csv, jsonl or xlsx."
        ))
    })?;
    let (media_type, ext) = format.media_type();
    let (export, quality) = state
        .service
        .export_session(id, format, signed.me.token_id)
        .await?;
    let body = sessions::export_body(export);
    let file = sessions::attachment(media_type, &format!("session-{id}.{ext}"), body);
    Ok(sessions::with_error_bound(file, &quality))
}
