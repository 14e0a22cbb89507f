//! The AI verifiers as the configuration declares them: each backend's
//! `[verifiers.NAME]` table (its concurrency and retries, credentials in its
//! URL kept from viewers, the `command` kind, request fields left out) and the
//! session's `verify` block, refused at scan when it cannot work.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{Behaviour, FakeLlm, down_url};
use crate::helpers::*;
use crate::verifiers::{QUESTION, submit_next, verified_config, verifiers_toml};

#[tokio::test]
async fn each_backend_is_held_to_its_concurrency_and_transient_errors_are_retried() {
    let slow = FakeLlm::start(
        "judge-slow",
        Behaviour::Slow(Duration::from_millis(50), "NO".into()),
    )
    .await;
    let overloaded = FakeLlm::start("judge-503", Behaviour::Status(503)).await;
    let toml = verifiers_toml(&[
        ("alpha", &slow.base_url, 20_000, 1),
        ("beta", &overloaded.base_url, 700, 4),
    ]);
    let app = spawn_app_with(&toml).await;
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha", "beta"], "questions": [QUESTION, "Is the address invented?"], "quorum": 1});
    let agent = app.token("agent", "bot").await;
    let session = app.scan(config, companies(4)).await;
    let mut quests = Vec::new();
    for i in 0..4 {
        let (quest, _) = submit_next(
            &app,
            &agent,
            &session,
            json!({"email": format!("info{i}@acme.test")}),
        )
        .await;
        quests.push(quest);
    }
    for quest in &quests {
        assert_eq!(app.settled(quest).await["state"], "PASS");
    }
    assert_eq!(slow.requests().len(), 8);
    assert_eq!(slow.max_in_flight(), 1, "max_concurrency = 1");
    assert!(overloaded.requests().len() > 8, "503 is retried");
    let beta = app.quest(&quests[0]).await["l2_answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["verifier"] == "beta")
        .unwrap()
        .clone();
    assert!(beta["detail"].as_str().unwrap().contains("503"), "{beta}");
}

#[tokio::test]
async fn credentials_in_a_base_url_and_upstream_error_bodies_never_reach_viewers() {
    let key = "sk-live-0123456789abcdef0123";
    let leaky = FakeLlm::start(
        "judge-beta",
        Behaviour::StatusBody(
            401,
            format!(r#"{{"error": {{"message": "Incorrect API key provided: {key}. Internal trace 7f6e5d4c3b2a19080706f5e4d3c2b1a0"}}}}"#),
        ),
    )
    .await;
    let fine = FakeLlm::start("judge-gamma", Behaviour::says("NO: fine")).await;
    let down_with_password =
        down_url().replace("http://", "http://quest:hunter2@") + "?api-key=querysecret";
    let app = spawn_app_with(&verifiers_toml(&[
        ("alpha", &down_with_password, 600, 4),
        ("beta", &leaky.base_url, 5_000, 4),
        ("gamma", &fine.base_url, 5_000, 4),
    ]))
    .await;
    let agent = app.token("agent", "bot").await;
    let viewer = app.token("viewer", "eve").await;
    let session = app.scan(verified_config(1, 1), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    app.settled(&quest).await;
    let view = app
        .get(&format!("/v1/quests/{quest}"), &viewer)
        .await
        .expect(200);
    let answers = view["l2_answers"].as_array().unwrap();
    let detail = |name: &str| {
        answers.iter().find(|a| a["verifier"] == name).unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        detail("alpha").contains("no reply from http://***@127.0.0.1"),
        "{}",
        detail("alpha")
    );
    assert!(
        detail("beta").starts_with("HTTP 401 Unauthorized: Incorrect API key provided: ***"),
        "{}",
        detail("beta")
    );
    let shown = view.to_string();
    for secret in ["hunter2", "querysecret", "0123456789abcdef", "7f6e5d4c3b2a"] {
        assert!(
            !shown.contains(secret),
            "{secret} reached a viewer: {shown}"
        );
    }
}

#[tokio::test]
async fn a_command_verifier_reads_the_request_on_stdin_and_prints_its_answer() {
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
    let app = spawn_app_with(&toml).await;
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["local"], "questions": [QUESTION]});
    let agent = app.token("agent", "bot").await;
    let session = app.scan(config, companies(2)).await;
    let (own, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let (free, _) = submit_next(&app, &agent, &session, json!({"email": "boss@gmail.test"})).await;
    assert_eq!(app.settled(&own).await["state"], "PASS");
    let view = app.settled(&free).await;
    assert_eq!(view["state"], "REVIEW");
    let answer = &view["l2_answers"][0];
    assert_eq!(
        (answer["model"].as_str(), answer["detail"].as_str()),
        (Some("house-rules"), Some("free mail"))
    );
}

#[tokio::test]
async fn a_verifier_can_leave_max_tokens_and_temperature_out_of_its_requests() {
    let fake = FakeLlm::start("reasoner", Behaviour::says("NO: fine")).await;
    let toml = format!(
        "[verifiers.alpha]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"reasoner\"\n\
         omit = [\"max_tokens\", \"temperature\"]\n",
        fake.base_url
    );
    let app = spawn_app_with(&toml).await;
    let agent = app.token("agent", "bot").await;
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha"], "questions": [QUESTION]});
    let session = app.scan(config, companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    assert_eq!(app.settled(&quest).await["state"], "PASS");
    let sent = &fake.requests()[0];
    assert!(
        sent.get("max_tokens").is_none() && sent.get("temperature").is_none(),
        "{sent}"
    );
    assert_eq!(sent["model"], "reasoner");
}

#[tokio::test]
async fn unknown_verifiers_and_gates_that_declare_no_fields_are_refused_at_scan() {
    let fake = FakeLlm::start("judge-alpha", Behaviour::says("NO")).await;
    let app = spawn_app_with(&verifiers_toml(&[("alpha", &fake.base_url, 1_000, 1)])).await;
    let scan = |config: Value| {
        let app = &app;
        async move {
            app.post(
                "/v1/sessions",
                &app.admin,
                json!({"config": config, "items": companies(1)}),
            )
            .await
        }
    };
    let mut unknown = contact_config(3);
    unknown["verify"] = json!({"verifiers": ["alpha", "omega"], "questions": ["q?"]});
    let refused = scan(unknown).await;
    refused.refused(422, "invalid_config");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("omega"),
        "{}",
        refused.body
    );

    let mut open = contact_config(3);
    open["gate"] = json!({"kind": "schema", "schema": {"type": "object"}});
    open["verify"] = json!({"verifiers": ["alpha"], "questions": ["q?"]});
    scan(open).await.refused(422, "invalid_config");

    let mut defaults = contact_config(3);
    defaults["verify"] = json!({"verifiers": ["alpha"]});
    let created = scan(defaults).await.expect(201);
    let questions = created["config"]["verify"]["questions"].as_array().unwrap();
    assert_eq!(
        questions.len(),
        2,
        "the schema gate's default questions are stored: {created}"
    );
    assert!(
        questions[1]["text"]
            .as_str()
            .unwrap()
            .contains("text addressed to a verifier"),
        "the second catches instructions aimed at the verifier: {created}"
    );
    assert_eq!(created["config"]["verify"]["quorum"], 1);

    let plain = spawn_app().await;
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha"], "questions": ["q?"]});
    let refused = plain
        .post(
            "/v1/sessions",
            &plain.admin,
            json!({"config": config, "items": companies(1)}),
        )
        .await;
    refused.refused(422, "invalid_config");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("declares no verifiers")
    );
    assert!(
        plain
            .get("/v1/sessions", &plain.admin)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn thresholds_and_quorums_that_cannot_work_are_refused_at_scan() {
    let fake = FakeLlm::start("judge", Behaviour::says("NO")).await;
    let app = spawn_app_with(&verifiers_toml(&[
        ("alpha", &fake.base_url, 1_000, 1),
        ("beta", &fake.base_url, 1_000, 1),
        ("gamma", &fake.base_url, 1_000, 1),
    ]))
    .await;
    for (threshold, quorum, says) in [
        (3, 2, "more than the quorum"),
        (4, 3, "number of verifiers"),
        (1, 4, "number of verifiers"),
        (0, 2, "between 1"),
        (1, 0, "between 1"),
    ] {
        let refused = app
            .post(
                "/v1/sessions",
                &app.admin,
                json!({"config": verified_config(threshold, quorum), "items": companies(1)}),
            )
            .await;
        refused.refused(422, "invalid_config");
        let message = refused.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(says),
            "threshold {threshold}, quorum {quorum}: {message}"
        );
    }
    assert!(
        app.get("/v1/sessions", &app.admin)
            .await
            .expect(200)
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing was stored"
    );
}
