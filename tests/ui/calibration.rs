//! The session page's calibration panel: each AI verifier against the
//! reviewers, and the quests where they disagreed. A console bulk decision is
//! no label.

use serde_json::json;

use crate::console::*;

#[tokio::test]
async fn the_session_page_shows_each_verifiers_calibration_and_where_it_and_the_reviewer_disagreed()
{
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("judge.sh");
    std::fs::write(
        &script,
        "request=$(cat)\ncase \"$request\" in\n  *gmail.test*) echo '{\"answer\": \"yes\", \"reason\": \"free mail\"}' ;;\n  *) echo '{\"answer\": \"no\", \"reason\": \"own domain\"}' ;;\nesac\n",
    )
    .unwrap();
    let toml = format!(
        "[verifiers.local]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"{}\"]\nenv = [\"PATH\"]\nmodel = \"house-rules\"\ntimeout_ms = 10000\n",
        script.display()
    );
    let app = crate::helpers::spawn_app_with(&toml).await;
    let mut config = crate::helpers::contact_config(3);
    config["verify"] =
        json!({"verifiers": ["local"], "questions": ["Is the address a personal one?"]});
    let session = app.scan(config, crate::helpers::companies(3)).await;
    let agent = app.token("agent", "bot").await;
    let mut quests = Vec::new();
    for email in ["boss@gmail.test", "ceo@gmail.test", "owner@gmail.test"] {
        let (id, _) = work(&app, &agent, &session, "bot", json!({"email": email})).await;
        assert_eq!(app.settled(&id).await["state"], "REVIEW");
        quests.push(id);
    }
    let ana = app.token("reviewer", "ana").await;
    for (quest, decision, note) in [
        (&quests[0], "approve", "the owner reads it"),
        (&quests[1], "reject", "not the company's"),
    ] {
        app.post(
            &format!("/v1/review/{quest}"),
            &ana,
            json!({"decision": decision, "note": note}),
        )
        .await
        .expect(200);
    }
    // The third in bulk, through the console: no label.
    let alice = sign_in(&app, &app.token("reviewer", "alice").await).await;
    let fields = [
        ("csrf", alice.csrf.as_str()),
        ("decision", "approve"),
        ("session", session.as_str()),
        ("quest", quests[2].as_str()),
        ("note", "all fine"),
    ];
    post(&app, "/ui/review/bulk", Some(&alice), form(&fields), &[])
        .await
        .expect(200);
    assert_eq!(app.quest(&quests[2]).await["state"], "PASS");

    let page = get(&app, &format!("/ui/sessions/{session}"), Some(&alice)).await;
    let body = page.expect(200);
    let panel = &body[body.find("data-calibration").expect("a calibration panel")..];
    let panel = &panel[..panel.find("</section>").unwrap()];
    for shown in [
        r#"<tr data-verifier="local" data-question-index="0" data-standing="voting">"#,
        r#"data-count="labels">2<"#,
        r#"data-count="upheld">1<"#,
        r#"data-count="overruled">1<"#,
        r#"data-count="missed">0<"#,
        r#"title="fewer than 10 labels (2)">—<"#,
        &format!(
            r#"<li data-quest-id="{}" data-verifier="local">"#,
            quests[0]
        ),
        "flagged it (question 1); ana approved it",
    ] {
        assert!(panel.contains(shown), "the panel shows `{shown}`: {panel}");
    }
    assert!(
        !panel.contains(&format!(r#"data-quest-id="{}""#, quests[1])),
        "an upheld flag is no disagreement"
    );
    assert!(
        !panel.contains(&format!(r#"data-quest-id="{}""#, quests[2])),
        "a bulk decision is no label"
    );
}
