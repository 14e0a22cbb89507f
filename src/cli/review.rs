//! `quest review`: the human review queue, interactive or one decision at a time.

use crate::domain::ids::QuestId;
use std::io::{BufRead, Write};

use serde_json::{Value, json};

use super::client::{CliError, print_json};
use super::text::{say, say_err};
use super::{Ctx, exit};
use crate::api::{Quest, ReviewClaim, ReviewRequest};
use crate::domain::Decision;

/// `quest review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    #[command(subcommand)]
    pub verb: Option<ReviewVerb>,
}

/// The non-interactive forms.
#[derive(Debug, clap::Subcommand)]
pub enum ReviewVerb {
    /// List the REVIEW quests of the session, oldest first.
    List,
    /// Approve a quest (→ PASS).
    Approve {
        id: QuestId,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Reject a quest (→ DONE).
    Reject {
        id: QuestId,
        #[arg(long)]
        note: String,
    },
}

/// Runs `quest review`.
pub async fn run(ctx: &Ctx, args: ReviewArgs) -> Result<u8, CliError> {
    match args.verb {
        Some(ReviewVerb::List) => {
            let queue = queue(ctx).await?;
            if ctx.args.json {
                print_json(&queue);
            } else if queue.is_empty() {
                println!("The review queue is empty.");
            } else {
                for quest in &queue {
                    say!("{}", describe(quest));
                }
            }
            Ok(exit::OK)
        }
        Some(ReviewVerb::Approve { id, note }) => decide(ctx, id, Decision::Approve, note).await,
        Some(ReviewVerb::Reject { id, note }) => decide(ctx, id, Decision::Reject, note).await,
        None => interactive(ctx).await,
    }
}

async fn queue(ctx: &Ctx) -> Result<Vec<Quest>, CliError> {
    let session = ctx.session().await?;
    ctx.client
        .get(&format!("/v1/review?session={session}"))
        .await
}

async fn decide(ctx: &Ctx, id: QuestId, decision: Decision, note: String) -> Result<u8, CliError> {
    let (_, quest): (_, Quest) = ctx
        .client
        .post(
            &format!("/v1/review/{id}"),
            &ReviewRequest { decision, note },
        )
        .await?;
    if ctx.args.json {
        print_json(&quest);
    } else {
        say!(
            "{} `{}` is now {} ({}).",
            quest.id,
            quest.key,
            quest.state,
            quest.decided_by.unwrap_or_default()
        );
    }
    Ok(exit::OK)
}

/// A quest in REVIEW as a reviewer reads it: input, result, facts, evidence.
pub fn describe(quest: &Quest) -> String {
    let mut out = format!(
        "── {} `{}` (row {}, tries {})\n",
        quest.id,
        quest.key,
        quest.row + 1,
        quest.tries
    );
    out.push_str(&format!("   input:  {}\n", quest.input));
    out.push_str(&format!(
        "   result: {}\n",
        quest.result.clone().unwrap_or(Value::Null)
    ));
    for f in &quest.last_facts {
        out.push_str(&format!(
            "   fact:   {} {}: expected {}, found {} ({})\n",
            f.check, f.field, f.expected, f.actual, f.hint
        ));
    }
    if let Some(last) = quest.submissions.last() {
        for e in &last.evidence {
            out.push_str(&format!("   evidence: {e}\n"));
        }
    }
    out
}

fn ask(prompt: &str) -> Option<String> {
    print!("{prompt}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_owned()),
    }
}

/// Gives a review claim back; a failure only means it expires on its own.
async fn release(ctx: &Ctx, quest: QuestId) {
    if let Err(e) = ctx
        .client
        .delete_empty(&format!("/v1/review/{quest}/claim"))
        .await
    {
        say_err!("{} (the claim will expire on its own)", e.line());
    }
}

async fn interactive(ctx: &Ctx) -> Result<u8, CliError> {
    let queue = queue(ctx).await?;
    if queue.is_empty() {
        println!("The review queue is empty.");
        return Ok(exit::OK);
    }
    let (mut approved, mut rejected, mut skipped) = (0, 0, 0);
    for quest in queue {
        let claim: Result<(_, ReviewClaim), _> = ctx
            .client
            .post(&format!("/v1/review/{}/claim", quest.id), &json!({}))
            .await;
        if let Err(e) = claim {
            say_err!("{} (skipped)", e.line());
            skipped += 1;
            continue;
        }
        say!("{}", describe(&quest));
        let decision = loop {
            match ask("[a]pprove, [r]eject, [s]kip, [q]uit? ").as_deref() {
                Some("a") => break Some(Decision::Approve),
                Some("r") => break Some(Decision::Reject),
                Some("s") => break None,
                Some("q") | None => {
                    // Give the claim back, so that the next reviewer need not wait for it to expire.
                    release(ctx, quest.id).await;
                    println!("Approved {approved}, rejected {rejected}, skipped {skipped}.");
                    return Ok(exit::OK);
                }
                Some(_) => println!("Type a, r, s or q."),
            }
        };
        let Some(decision) = decision else {
            release(ctx, quest.id).await;
            skipped += 1;
            continue;
        };
        let note = match decision {
            Decision::Reject => loop {
                match ask("note (why it is wrong; required): ") {
                    Some(note) if !note.trim().is_empty() => break note,
                    Some(_) => println!("A rejection needs a note."),
                    None => {
                        release(ctx, quest.id).await;
                        return Ok(exit::OK);
                    }
                }
            },
            Decision::Approve => ask("note (optional): ").unwrap_or_default(),
        };
        decide(ctx, quest.id, decision, note).await?;
        match decision {
            Decision::Approve => approved += 1,
            Decision::Reject => rejected += 1,
        }
    }
    println!("Approved {approved}, rejected {rejected}, skipped {skipped}.");
    Ok(exit::OK)
}
