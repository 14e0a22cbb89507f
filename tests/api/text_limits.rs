//! Text the store cannot keep and text that would grow without bound: a NUL
//! an agent or a reviewer sends is refused at the door (422 `invalid_text`,
//! naming where), one that a gate, a page, a program or a model gives back
//! is replaced by U+FFFD with a fact saying so, and a result larger than its
//! session allows is refused (413 `result_too_large`). Every test runs on
//! the backend the suite runs on (`QUEST_TEST_DATABASE=postgres` for
//! PostgreSQL, which is the one that refuses a NUL).

use serde_json::{Value, json};

use crate::fake_llm::{Behaviour, FakeLlm};
use crate::helpers::*;
use crate::verifiers::{QUESTION, verifiers_toml};

/// The facts of the quest's latest submission.
fn last_facts(view: &Value) -> Vec<Value> {
    view["submissions"]
        .as_array()
        .and_then(|s| s.last())
        .map(|s| s["facts"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_nul_an_agent_or_a_reviewer_sends_is_refused_naming_where_and_nothing_is_stored() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let submit = format!("/v1/quests/{quest}/submit");
    for (result, pointer) in [
        (json!({"email": "info\u{0}@acme.test"}), "/result/email"),
        (
            json!({"email": "a@b.test", "notes": [1, "x\u{0}"]}),
            "/result/notes/1",
        ),
        (
            json!({"email": "a@b.test", "k\u{0}": 1}),
            "/result/k\\u0000",
        ),
    ] {
        let answer = app
            .post(
                &submit,
                &agent,
                json!({"lease_id": lease, "result": result}),
            )
            .await;
        answer.refused(422, "invalid_text");
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{pointer}`")), "{message}");
    }
    assert_eq!(app.quest(&quest).await["submissions"], json!([]));

    app.post(
        &format!("/v1/sessions/{session}/next"),
        &agent,
        json!({"agent": "b\u{0}t"}),
    )
    .await
    .refused(422, "invalid_text");
    app.get(&format!("/v1/sessions/{session}/lease?agent=b%00t"), &agent)
        .await
        .refused(422, "invalid_text");
    app.post(
        "/v1/tokens",
        &app.admin,
        json!({"name": "evil\u{0}", "role": "agent"}),
    )
    .await
    .refused(422, "invalid_text");
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    assert!(!tokens.to_string().contains("evil"), "{tokens}");

    // A reviewer's note, on a quest under review.
    let (review, lease) = assigned(&app.next(&agent, &session, "a").await);
    assert_eq!(review, quest);
    let low = json!({"email": "a@b.test", "confidence": "low"});
    assert_eq!(
        app.submit(&agent, &quest, &lease, low).await.expect(200)["state"],
        "REVIEW"
    );
    let reviewer = app.token("reviewer", "rita").await;
    app.post(&format!("/v1/review/{quest}/claim"), &reviewer, json!({}))
        .await
        .expect(200);
    app.post(
        &format!("/v1/review/{quest}"),
        &reviewer,
        json!({"decision": "reject", "note": "fake\u{0}"}),
    )
    .await
    .refused(422, "invalid_text");
    assert_eq!(app.quest(&quest).await["state"], "REVIEW");
}

/// Writes `script` as `check.sh` in `dir` and declares it as command gate `check`.
fn gate_toml(dir: &tempfile::TempDir, script: &str) -> String {
    std::fs::write(dir.path().join("check.sh"), script).unwrap();
    format!(
        "[gates.check]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./check.sh\"]\nworkdir = \"{}\"\n\
         timeout_ms = 10000\n",
        dir.path().display()
    )
}

/// Submits `result` to a fresh quest of a session with `config` and waits
/// (a bounded time) for the verdict; the quest as it stands then.
async fn decided(app: &TestApp, config: Value, result: Value) -> Value {
    let agent = app.token("agent", "bot").await;
    let session = app.scan(config, companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .post(
            &format!("/v1/quests/{quest}/submit?wait=20"),
            &agent,
            json!({"lease_id": lease, "result": result}),
        )
        .await;
    assert_eq!(
        answer.status, 200,
        "decided, not held PENDING: {}",
        answer.body
    );
    app.quest(&quest).await
}

fn command_config() -> Value {
    json!({"key_column": "company", "gate": {"kind": "command", "name": "check"}})
}

#[tokio::test]
async fn a_nul_in_a_programs_stderr_or_evidence_is_replaced_and_the_verdict_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with(&gate_toml(
        &dir,
        "cat > /dev/null\nprintf 'bad\\000news' >&2\nexit 1\n",
    ))
    .await;
    let view = decided(&app, command_config(), json!({"test": "t"})).await;
    assert_eq!(view["state"], "TODO", "{view}");
    let facts = last_facts(&view);
    assert_eq!(facts[0]["check"], "text", "{view}");
    assert!(
        facts
            .iter()
            .any(|f| f["actual"].as_str().unwrap().contains("bad\u{FFFD}news")),
        "{view}"
    );

    let dir = tempfile::tempdir().unwrap();
    let script = "cat > /dev/null\necho '{\"verdict\": \"PASS\", \"evidence\": [{\"page\": \"a\\u0000b\", \"k\\u0000\": 1}]}'\n";
    let app = spawn_app_with(&gate_toml(&dir, script)).await;
    let view = decided(&app, command_config(), json!({"test": "t"})).await;
    assert_eq!(view["state"], "PASS", "{view}");
    let submission = &view["submissions"][0];
    assert_eq!(
        submission["evidence"],
        json!([{"page": "a\u{FFFD}b", "k\u{FFFD}": 1}]),
        "{view}"
    );
    assert_eq!(last_facts(&view)[0]["check"], "text", "{view}");
}

#[tokio::test]
async fn a_nul_in_a_models_reply_is_replaced_and_the_answer_is_stored() {
    let fake = FakeLlm::start(
        "judge-alpha",
        Behaviour::says("NO: it is the company's own\u{0} address"),
    )
    .await;
    let app = spawn_app_with(&verifiers_toml(&[("alpha", &fake.base_url, 5000, 2)])).await;
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha"], "questions": [QUESTION]});
    let view = decided(&app, config, json!({"email": "info@acme.test"})).await;
    let view = app.settled(view["id"].as_str().unwrap()).await;
    assert_eq!(view["state"], "PASS", "{view}");
    let answers = view["l2_answers"].to_string();
    assert!(answers.contains("U+0000"), "the reason says so: {view}");
    assert!(answers.contains('\u{FFFD}'), "{view}");
}

#[tokio::test]
async fn a_result_past_the_sessions_max_result_bytes_is_refused_with_413_naming_the_limit() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let mut config = contact_config(3);
    config["max_result_bytes"] = json!(1000);
    let session = app.scan(config, companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let big = json!({"email": "a@b.test", "notes": "x".repeat(1000)});
    let answer = app.submit(&agent, &quest, &lease, big).await;
    answer.refused(413, "result_too_large");
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000"),
        "{}",
        answer.body
    );
    assert_eq!(app.quest(&quest).await["submissions"], json!([]));
    let fits = json!({"email": "a@b.test", "notes": "x".repeat(900)});
    assert_eq!(
        app.submit(&agent, &quest, &lease, fits).await.expect(200)["verdict"],
        "PASS"
    );

    let mut config = contact_config(3);
    config["max_result_bytes"] = json!(1024 * 1024 + 1);
    app.post(
        "/v1/sessions",
        &app.admin,
        json!({"config": config, "items": companies(1)}),
    )
    .await
    .refused(422, "invalid_config");
}

#[tokio::test]
async fn a_one_mib_submission_that_breaks_every_item_keeps_fifty_facts_and_bounded_rows() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let config = json!({
        "key_column": "company",
        "max_result_bytes": 1024 * 1024,
        "gate": {"kind": "schema", "schema": {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "integer"}}}
        }},
        "prompt": {"instructions": "Count."}
    });
    let session = app.scan(config, companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let item = "x".repeat(20);
    let n = (1024 * 1024 - 100) / (item.len() + 3);
    let result = json!({"items": vec![item; n]});
    let body = json!({"lease_id": lease, "result": result});
    let reply = app
        .client
        .post(format!("{}/v1/quests/{quest}/submit", app.base))
        .bearer_auth(&agent)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let reply = reply.bytes().await.unwrap();
    let answer: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(answer["verdict"], "FAIL", "{answer}");
    let facts = answer["facts"].as_array().unwrap();
    assert_eq!(facts.len(), 50);
    assert_eq!(facts[49]["check"], "facts");
    assert_eq!(facts[49]["actual"], format!("{} more not shown", n - 49));
    assert!(
        reply.len() < 64 * 1024,
        "the reply is {} bytes",
        reply.len()
    );

    let next = app.next(&agent, &session, "a").await;
    let prompt = next["prompt"].as_str().unwrap();
    assert!(
        prompt.len() < 64 * 1024,
        "the next prompt is {} bytes",
        prompt.len()
    );
    assert!(next.to_string().len() < 64 * 1024);

    let mut db = crate::ratchet::raw(&app).await;
    let stored = db
        .scalar(if on_postgres() {
            "SELECT SUM(octet_length(facts::text) + octet_length(evidence::text))::BIGINT FROM submissions"
        } else {
            "SELECT SUM(length(facts) + length(evidence)) FROM submissions"
        })
        .await;
    assert!(stored < 64 * 1024, "facts and evidence take {stored} bytes");
    let quest_row = db
        .scalar(if on_postgres() {
            "SELECT SUM(octet_length(last_facts::text))::BIGINT FROM quests"
        } else {
            "SELECT SUM(length(last_facts)) FROM quests"
        })
        .await;
    assert!(
        quest_row < 64 * 1024,
        "the quest's last facts take {quest_row} bytes"
    );

    // The console's page of the quest: the result once, and fifty facts.
    let viewer = app.token("viewer", "vera").await;
    let console = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed = console
        .post(format!("{}/ui/login", app.base))
        .header("origin", app.base.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={viewer}&next=%2Fui"))
        .send()
        .await
        .unwrap();
    let cookie = signed.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = console
        .get(format!("{}/ui/quests/{quest}", app.base))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.bytes().await.unwrap();
    assert!(
        page.len() < 4 * 1024 * 1024,
        "the console's quest page is {} bytes",
        page.len()
    );
}
