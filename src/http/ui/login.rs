//! Signing in with a token, and signing out.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{self, Fields, SignedForm};
use super::{PageError, PageQuery, templates};
use crate::http::AppState;
use crate::http::extract::Read;

/// The query of the sign-in page.
#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// The sign-in form: one field, `token`.
pub async fn form(PageQuery(query): PageQuery<LoginQuery>) -> Result<Response, PageError> {
    let next = auth::safe_next(query.next.as_deref());
    Ok(templates::render(
        "login.html",
        minijinja::context! { me => (), next, error => () },
    )?
    .into_response())
}

/// Starts a browser session for a valid token and sends the browser on.
pub async fn sign_in(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    fields: Fields,
) -> Result<Response, PageError> {
    let next = auth::safe_next(fields.get("next"));
    let token = fields.get("token").unwrap_or_default();
    let Some(signed_in) = state.service.sign_in(token).await? else {
        let error = "That token is unknown or revoked. Paste a token an admin created for you \
                     (`quest token create`), or the admin token from <data-dir>/admin.token.";
        let page = templates::render("login.html", minijinja::context! { me => (), next, error })?;
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    };
    let cookie = auth::start_cookie(&signed_in.cookie, auth::over_https(&uri, &headers));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(&next)).into_response())
}

/// Ends the browser session and removes its cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    form: SignedForm<Read>,
) -> Result<Response, PageError> {
    state.service.sign_out(&form.cookie).await?;
    let cookie = auth::end_cookie(auth::over_https(&uri, &headers));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response())
}
