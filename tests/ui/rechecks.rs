//! Re-check marks in the console: a stale PASS quest carries a badge in the
//! quest table and on its page, the table filters by mark, and the agents
//! table shows the share of each agent's PASS quests that went stale.

use quest::domain::recheck::Outcome;
use quest::domain::{Fact, Verdict};
use quest::store::NewRecheck;
use serde_json::json;

use crate::console::*;
use crate::helpers::spawn_app_tuned;

#[tokio::test]
async fn a_stale_quest_has_a_badge_a_filter_and_counts_against_its_agent() {
    // The background re-checker looks once an hour: the test records the re-checks itself.
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| {
        c.sweep_seconds = 3600
    })
    .await;
    let (session, agent) = session(&app, 3).await;
    let (stale, answer) = work(
        &app,
        &agent,
        &session,
        "bot-a",
        json!({"email": "a@firm.test"}),
    )
    .await;
    assert_eq!(answer["verdict"], "PASS");
    let (fine, _) = work(
        &app,
        &agent,
        &session,
        "bot-a",
        json!({"email": "b@firm.test"}),
    )
    .await;

    let run = app
        .store
        .start_recheck(session.parse().unwrap(), "admin", None)
        .await
        .unwrap()
        .expect("a run starts");
    assert_eq!(run.total, 2);
    for (quest, verdict, outcome) in [
        (&stale, Verdict::Fail, Outcome::Stale),
        (&fine, Verdict::Pass, Outcome::Confirmed),
    ] {
        let facts = match outcome {
            Outcome::Stale => vec![Fact::new(
                "source",
                "/email",
                "on the page",
                "not on the page",
                "cite the page",
            )],
            _ => Vec::new(),
        };
        let recorded = app
            .store
            .record_recheck(NewRecheck {
                run_id: run.id,
                quest_id: quest.parse().unwrap(),
                verdict,
                outcome,
                facts,
                evidence: Vec::new(),
                gate: "schema".into(),
                gate_version: "1".into(),
                passed_gate_version: Some("1".into()),
                digest: "sha256:00".into(),
            })
            .await
            .unwrap();
        assert!(!recorded.replayed);
    }

    let vera = sign_in(&app, &app.token("viewer", "vera").await).await;
    let page = get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    let body = page.expect(200);
    assert_eq!(count(body, r#"data-mark="stale""#), 1, "one badge: {body}");
    assert!(body.contains(r#"data-count="stale">1<"#), "{body}");
    let at = body.find(r#"data-agent="bot-a""#).expect("bot-a has a row");
    let row = &body[at..at + body[at..].find("</tr>").unwrap()];
    assert!(
        row.contains(r#"data-stale="1" data-pass="2""#) && row.contains(">50%<"),
        "half of bot-a's PASS quests went stale: {row}"
    );
    assert!(
        body.contains("Stale <span class=\"chip-count\">1</span>"),
        "{body}"
    );

    let page = get(
        &app,
        &format!("/ui/sessions/{session}?mark=stale"),
        Some(&vera),
    )
    .await;
    let body = page.expect(200);
    assert_eq!(
        count(body, "data-quest-id="),
        1,
        "only the stale quest: {body}"
    );
    assert!(body.contains(&format!(r#"data-quest-id="{stale}""#)));
    let bad = get(
        &app,
        &format!("/ui/sessions/{session}?mark=old"),
        Some(&vera),
    )
    .await;
    assert!(bad.expect(400).contains("stale or unconfirmed"));

    let page = get(&app, &format!("/ui/quests/{stale}"), Some(&vera)).await;
    let body = page.expect(200);
    assert!(body.contains(r#"data-mark="stale""#), "{body}");
    assert!(body.contains(r#"data-recheck-outcome="stale""#), "{body}");
    assert!(body.contains("PASS"), "it stays PASS");
}
