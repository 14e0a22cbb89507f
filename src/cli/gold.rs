//! `quest gold`: a session's known-answer items, and what they say of each token.

use std::path::PathBuf;

use super::client::print_json;
use super::text::say;
use super::{CliError, Ctx, exit};
use crate::api::{GoldAdded, GoldItem, SessionGold};
use crate::domain::gold::GoldKind;

/// `quest gold`.
#[derive(Debug, clap::Subcommand)]
pub enum GoldVerb {
    /// Add known-answer items from a file (admin): a JSON array of items,
    /// `{"items": [...]}`, or JSON Lines with one item a line; each item is
    /// `{"input": {...}, "expected": {...}, "compare": {...}}`, or a canary,
    /// `{"kind": "canary", "input": {...}}`, for which no honest result can pass.
    Add { file: PathBuf },
    /// Each token's answers to gold, the correct ones and the lower bound on
    /// its accuracy; and the canaries that passed.
    Scores,
}

pub async fn run(ctx: &Ctx, verb: GoldVerb) -> Result<u8, CliError> {
    let session = ctx.session().await?;
    let path = format!("/v1/sessions/{session}/gold");
    match verb {
        GoldVerb::Add { file } => {
            let items = read_items(&file)?;
            let (_, added): (_, GoldAdded) = ctx
                .client
                .post(&path, &serde_json::json!({"items": items}))
                .await?;
            if ctx.args.json {
                print_json(&added);
            } else {
                say!(
                    "added {} gold items; the session holds {}",
                    added.added,
                    added.items
                );
            }
        }
        GoldVerb::Scores => {
            let gold: SessionGold = ctx.client.get(&path).await?;
            if ctx.args.json {
                print_json(&gold);
                return Ok(exit::OK);
            }
            let canaries = (gold.items.iter())
                .filter(|i| i.kind == GoldKind::Canary)
                .count();
            let and_canaries = match canaries {
                0 => String::new(),
                1 => " and 1 canary".to_owned(),
                n => format!(" and {n} canaries"),
            };
            say!(
                "{} gold items{and_canaries}, handed out {} times",
                gold.items.len() - canaries,
                gold.handed_out
            );
            for t in &gold.tokens {
                let bound = t
                    .accuracy_lower_bound
                    .map_or("—".to_owned(), |b| format!("{:.1}%", b * 100.0));
                let name = t.token.clone().unwrap_or_else(|| t.token_id.to_string());
                say!(
                    "{name}: {} of {} right, accuracy at least {bound} (one-sided 95%); agents {}",
                    t.correct,
                    t.answered,
                    t.agents.join(", ")
                );
            }
            for c in &gold.canary_passes {
                say!(
                    "canary quest {} PASSED ({}) on the answer of token {}: paused in every session",
                    c.quest_id,
                    c.decided_by,
                    c.token_id
                );
            }
        }
    }
    Ok(exit::OK)
}

/// The items of a file: a JSON array, `{"items": [...]}`, or JSON Lines.
fn read_items(file: &PathBuf) -> Result<Vec<GoldItem>, CliError> {
    let name = file.display();
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Usage(format!("{name}: cannot read it ({e})")))?;
    let bad = |e: serde_json::Error| {
        CliError::Usage(format!(
            "{name}: not gold items ({e}); give a JSON array of {{\"input\", \"expected\", \"compare\"}} \
             objects, {{\"items\": [...]}}, or one such object a line"
        ))
    };
    #[derive(serde::Deserialize)]
    struct Wrapped {
        items: Vec<GoldItem>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(bad);
    }
    if let Ok(Wrapped { items }) = serde_json::from_str::<Wrapped>(trimmed) {
        return Ok(items);
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(bad))
        .collect()
}
