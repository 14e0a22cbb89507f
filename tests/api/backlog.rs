//! A session whose agents are done but whose quests wait for a person is not
//! called decided (issue 21, point 3): `next` still answers finished, and
//! the CLI, the MCP tools, the guard and the status say who has the work.

use serde_json::json;

use crate::guard::{guard, stop_hook};
use crate::helpers::*;
use crate::mcp::{AgentEnv, data, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_done_and_the_quests_in_review_wait_for_a_person() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    for i in 0..3 {
        let (quest, lease) = assigned(&app.next(&token, &session, "bot").await);
        let confidence = if i == 0 { "high" } else { "low" };
        let email = format!("info@company{i:04}.test");
        app.submit(
            &token,
            &quest,
            &lease,
            json!({"email": email, "confidence": confidence}),
        )
        .await
        .expect(200);
    }
    let status = app.status(&session).await;
    assert_eq!(
        (&status["remaining"], &status["review"]),
        (&json!(0), &json!(2))
    );
    assert_eq!(
        status["review_eta_seconds"],
        json!(null),
        "nobody reviewed yet: {status}"
    );

    let bot = AgentEnv::new(&app, &token, &session, "bot");
    let (code, out) = bot.cli(&["next"]).await;
    assert_eq!(code, 11, "agents must stop: {out}");
    assert_eq!(
        out.trim(),
        "Stop here: agents are done; 2 wait for a person."
    );
    let mcp = bot.mcp().await;
    let finished = mcp.call("quest_next", None).await;
    assert_eq!(data(&finished)["status"], "finished");
    assert_eq!(
        text(&finished),
        "finished: agents are done; 2 wait for a person. Stop here."
    );
    mcp.client.cancel().await.unwrap();
    let allowed = guard(&bot, &[], &stop_hook("h1")).await.allowed();
    assert!(
        allowed.contains("agents are done; 2 wait for a person"),
        "{allowed}"
    );

    // A reviewer's pace gives the people's ETA; the agents' ETA keeps its meaning.
    let queue = app
        .get(&format!("/v1/review?session={session}"), &app.admin)
        .await
        .expect(200);
    let first = queue[0]["id"].as_str().unwrap();
    app.post(
        &format!("/v1/review/{first}"),
        &app.admin,
        json!({"decision": "approve", "note": ""}),
    )
    .await
    .expect(200);
    let status = app.status(&session).await;
    assert_eq!(status["review"], 1);
    assert_eq!(
        status["review_rate_per_hour"], 4.0,
        "one decision in 15 minutes: {status}"
    );
    assert_eq!(
        status["review_eta_seconds"], 900,
        "one left at 4 an hour: {status}"
    );
    let (_, out) = bot.cli(&["next"]).await;
    assert_eq!(
        out.trim(),
        "Stop here: agents are done; 1 waits for a person."
    );
}
