//! A quest's page (`/ui/quests/{id}`): its input and its whole history, each
//! submission with its verdict, facts, evidence and AI answers, the review
//! decisions and the receipt.

use crate::domain::ids::QuestId;
use axum::extract::State;
use axum::response::Html;
use serde::Serialize;

use super::auth::Signed;
use super::view::QuestView;
use super::{PageError, PagePath, templates};
use crate::http::AppState;
use crate::http::extract::Read;

#[derive(Serialize)]
struct QuestPage {
    quest: QuestView,
    session_name: String,
    max_tries: u32,
}

/// The quest's page.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Read>,
    PagePath(id): PagePath<QuestId>,
) -> Result<Html<String>, PageError> {
    let quest = state.service.get_quest_for(&signed.me.viewer(), id).await?;
    let session = state.service.get_session(quest.session_id).await?;
    let page = QuestPage {
        quest: QuestView::new(quest, state.service.now(), signed.me.token_id),
        session_name: session.name,
        max_tries: session.config.max_tries,
    };
    templates::page("quest.html", &signed.me, page)
}
