//! `quest quality`: how wrong a session's PASS rows may be, and what a
//! target asks of further audits.

use super::client::print_json;
use super::text::say;
use super::{CliError, Ctx, exit};
use crate::domain::ids::SessionId;
use crate::domain::quality::Quality;

/// `quest quality`.
#[derive(Debug, clap::Args)]
pub struct QualityArgs {
    /// A bound to reach, as a share (0.01 for 1%): prints how many more
    /// audits that find no error would reach it, or that none can.
    #[arg(long, value_parser = target)]
    pub target: Option<f64>,
}

fn target(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t < 1.0 => Ok(t),
        _ => Err(format!(
            "`{s}` is no share: give one between 0 and 1, such as 0.01 for 1%"
        )),
    }
}

/// Prints the session's error bound (and, with `--target`, the plan).
pub async fn run(ctx: &Ctx, args: QualityArgs) -> Result<u8, CliError> {
    let session = ctx.session().await?;
    let quality = of(ctx, session).await?;
    if ctx.args.json {
        print_json(&quality);
        return Ok(exit::OK);
    }
    say!("{}", quality.summary);
    if let Some(target) = args.target {
        say!("{}", quality.plan(target));
    }
    Ok(exit::OK)
}

/// The session's quality figures.
pub async fn of(ctx: &Ctx, session: SessionId) -> Result<Quality, CliError> {
    ctx.client
        .get(&format!("/v1/sessions/{session}/quality"))
        .await
}
