//! `quest recheck`: starts a re-check of the session's PASS quests (admin).
//! Each quest's gate runs again on its accepted result; a quest the world no
//! longer confirms is marked `stale` or `unconfirmed` and stays PASS.

use serde_json::json;

use super::client::print_json;
use super::text::say;
use super::{CliError, Ctx};
use crate::api::RecheckRun;

/// `quest recheck`.
#[derive(Debug, clap::Args)]
pub struct RecheckArgs {}

/// Starts the run and says how to follow it.
pub async fn run(ctx: &Ctx, _args: RecheckArgs) -> Result<u8, CliError> {
    let session = ctx.session().await?;
    let (_, run): (_, RecheckRun) = ctx
        .client
        .post(&format!("/v1/sessions/{session}/recheck"), &json!({}))
        .await?;
    if ctx.args.json {
        print_json(&run);
    } else {
        say!(
            "Re-checking {} PASS quests of session {session} (run {}). They stay PASS; \
             `quest status` shows how many went stale.",
            run.total,
            run.id
        );
    }
    Ok(super::exit::OK)
}
