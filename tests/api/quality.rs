//! The error bound of an export (issue 22, point 5): with `audit.rate` a
//! keyed share of the quests that would become PASS goes to a person first;
//! the decisions on those audits bound the share of wrong PASS rows, shown
//! by `GET /v1/sessions/{id}/quality` and on every export.

use serde_json::{Value, json};

use crate::helpers::{TestApp, assigned, companies, contact_config, spawn_app};

/// A session of `n` quests with the schema gate and `audit.rate = rate`, and its agent.
async fn audited_session(app: &TestApp, n: usize, rate: f64) -> (String, String) {
    let mut config = contact_config(3);
    config["audit"] = json!({"rate": rate});
    let session = app.scan(config, companies(n)).await;
    let agent = app
        .token("agent", &format!("agent-{}", &session[session.len() - 8..]))
        .await;
    (session, agent)
}

/// Works every quest of the session with a result the gate passes; the answers.
async fn work_all(app: &TestApp, agent: &str, session: &str, n: usize) -> Vec<Value> {
    let mut answers = Vec::new();
    for i in 0..n {
        let (quest, lease) = assigned(&app.next(agent, session, "bot").await);
        let result = json!({"email": format!("person{i}@firm.test"), "confidence": "high"});
        let mut answer = app
            .submit(agent, &quest, &lease, result)
            .await
            .expect(200)
            .to_owned();
        answer["id"] = quest.into();
        answers.push(answer);
    }
    answers
}

/// The XLSX export's `quality` sheet, by its first column.
fn quality_sheet(bytes: Vec<u8>) -> std::collections::HashMap<String, calamine::Data> {
    use calamine::Reader;
    let mut book = calamine::Xlsx::new(std::io::Cursor::new(bytes)).expect("a readable workbook");
    assert_eq!(book.sheet_names(), ["quests", "quality"]);
    let range = book.worksheet_range("quality").expect("a quality sheet");
    range
        .rows()
        .map(|row| (row[0].to_string(), row[1].clone()))
        .collect()
}

fn audit_fact(answer: &Value) -> Option<&Value> {
    answer["facts"]
        .as_array()?
        .iter()
        .find(|f| f["check"] == "audit")
}

async fn quality(app: &TestApp, session: &str) -> Value {
    let path = format!("/v1/sessions/{session}/quality");
    app.get(&path, &app.admin).await.expect(200).to_owned()
}

/// The export's `X-Quest-Error-Bound` header.
async fn export_bound(app: &TestApp, session: &str) -> String {
    let response = app
        .client
        .get(format!(
            "{}/v1/sessions/{session}/export?format=csv",
            app.base
        ))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.headers()["x-quest-error-bound"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_keyed_share_of_would_be_passes_goes_to_a_person_first() {
    let app = spawn_app().await;
    let (session, agent) = audited_session(&app, 40, 0.5).await;
    let answers = work_all(&app, &agent, &session, 40).await;
    let (mut audited, mut passed) = (0, 0);
    for answer in &answers {
        match audit_fact(answer) {
            Some(fact) => {
                audited += 1;
                assert_eq!(answer["verdict"], "REVIEW", "{answer}");
                assert_eq!(
                    fact["actual"],
                    "drawn for the audit sample (audit.rate 0.5)"
                );
                assert!(
                    fact["hint"]
                        .as_str()
                        .unwrap()
                        .starts_with("the gate passed this quest")
                );
            }
            None => {
                passed += 1;
                assert_eq!(answer["verdict"], "PASS", "{answer}");
            }
        }
    }
    // 40 draws at one half: 8 to 32 holds but for about 1 in 10^4.
    assert!(
        (8..=32).contains(&audited),
        "{audited} audited, {passed} passed"
    );
    let status = app.status(&session).await;
    assert_eq!(
        (status["review"].as_u64(), status["pass"].as_u64()),
        (Some(audited), Some(passed))
    );
    // The audits are in the review queue under their own check.
    let queue = app
        .get(
            &format!("/v1/review?session={session}&check=audit"),
            &app.admin,
        )
        .await
        .expect(200)
        .to_owned();
    assert_eq!(queue.as_array().unwrap().len() as u64, audited);
}

#[tokio::test]
async fn the_bound_is_not_measured_before_an_audit_and_then_reads_as_clopper_pearson() {
    let app = spawn_app().await;
    let (session, agent) = audited_session(&app, 300, 1.0).await;
    let answers = work_all(&app, &agent, &session, 300).await;
    assert!(
        answers.iter().all(|a| audit_fact(a).is_some()),
        "audit.rate 1 draws every quest"
    );

    let before = quality(&app, &session).await;
    assert_eq!(before["measured"], false, "{before}");
    assert_eq!(
        before["error_bound"],
        Value::Null,
        "never 0 without an audit: {before}"
    );
    assert_eq!(before["pending_audits"], 300);
    assert!(
        before["summary"]
            .as_str()
            .unwrap()
            .starts_with("not measured"),
        "{before}"
    );
    assert_eq!(export_bound(&app, &session).await, "not-measured");
    let status = app.status(&session).await;
    assert_eq!(
        status["quality"]["measured"], false,
        "status carries it too: {status}"
    );

    // A person rejects 3 of the 300 audited results and approves the rest.
    let reviewer = app.token("reviewer", "rita").await;
    for (i, answer) in answers.iter().enumerate() {
        let id = answer["id"].as_str().unwrap();
        let body = match i {
            0..3 => json!({"decision": "reject", "note": "not this company's address"}),
            _ => json!({"decision": "approve", "note": ""}),
        };
        app.post(&format!("/v1/review/{id}"), &reviewer, body)
            .await
            .expect(200);
    }
    let after = quality(&app, &session).await;
    assert_eq!(
        (
            after["measured"].as_bool(),
            after["audited"].as_u64(),
            after["errors"].as_u64()
        ),
        (Some(true), Some(300), Some(3)),
        "{after}"
    );
    // One-sided 95% Clopper-Pearson, 3 errors in 300: 2.56%.
    let bound = after["error_bound"].as_f64().unwrap();
    assert_eq!(format!("{:.2}%", bound * 100.0), "2.56%", "{after}");
    assert_eq!(
        app.status(&session).await["quality"],
        after,
        "the status's figures are the same"
    );
    assert_eq!(
        after["strata"],
        json!([{"stratum": "gate", "audited": 300, "errors": 3, "error_bound": bound}])
    );
    assert_eq!(
        (
            after["covered"].as_u64(),
            after["decided_by_person"].as_u64()
        ),
        (Some(297), Some(0)),
        "{after}"
    );
    assert_eq!(after["pending_audits"], 0);
    assert!(
        after["summary"]
            .as_str()
            .unwrap()
            .starts_with("at most 2.56% of 297 PASS rows are wrong"),
        "{after}"
    );
    let header = export_bound(&app, &session).await;
    assert_eq!(
        header,
        format!("{bound:.6}; confidence=0.95; audited=300; errors=3")
    );

    // The XLSX export carries the figures in a sheet of their own.
    let (status, xlsx) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=xlsx"))
        .await;
    assert_eq!(status, 200);
    let sheet = quality_sheet(xlsx);
    assert_eq!(sheet["error_bound"], calamine::Data::Float(bound));
    assert_eq!(sheet["audited"], calamine::Data::Float(300.0));
    assert_eq!(sheet["errors"], calamine::Data::Float(3.0));
    assert_eq!(sheet["measured"], calamine::Data::Bool(true));
    assert!(
        sheet["summary"].to_string().starts_with("at most 2.56%"),
        "{sheet:?}"
    );
    assert_eq!(sheet["stratum"].to_string(), "gate: 3 wrong in 300 audits");

    // The CLI: the bound as the export's last line, and what a target asks.
    let ops = crate::cli::Shell::new(&app, &app.admin, Some(&session), "ops");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.csv");
    let export = ops.run(&["export", "-o", file.to_str().unwrap()]).await;
    assert_eq!(export.code, 0, "{}", export.stderr);
    let last = export
        .stderr
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(
        last.starts_with("quest: quality: at most 2.56% of 297"),
        "{}",
        export.stderr
    );
    let plan = ops.run(&["quality", "--target", "0.05"]).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout.contains("the bound is under 5% already"),
        "{}",
        plan.stdout
    );
    let plan = ops.run(&["quality", "--target", "0.01"]).await;
    assert!(
        plan.stdout.contains("unreachable:")
            && plan.stdout.contains("only 0 PASS rows are not audited"),
        "every PASS row was audited: {}",
        plan.stdout
    );
    // The session's page says it too.
    let vera = crate::console::sign_in(&app, &app.token("viewer", "vera").await).await;
    let page = crate::console::get(&app, &format!("/ui/sessions/{session}"), Some(&vera)).await;
    let html = page.expect(200).to_owned();
    let line = html
        .split("data-quality")
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap();
    assert!(
        line.contains(&format!(r#"data-error-bound="{bound}""#)),
        "{line}"
    );
    assert!(
        line.contains("Error of the PASS rows: at most 2.56% of 297 PASS rows are wrong"),
        "{line}"
    );

    let bad = ops.run(&["quality", "--target", "5"]).await;
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("between 0 and 1"), "{}", bad.stderr);
}

#[tokio::test]
async fn an_audit_rate_outside_0_to_1_is_refused_saying_so() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["audit"] = json!({"rate": 1.5});
    let answer = app
        .post(
            "/v1/sessions",
            &app.admin,
            json!({"config": config, "items": companies(1)}),
        )
        .await;
    answer.refused(422, "invalid_config");
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("config.audit.rate") && message.contains("between 0 and 1"),
        "{message}"
    );
}

/// Post-hoc audits on a finished session: drawn uniformly from the unaudited
/// PASS rows, labelled by a person without changing any state, and counted
/// in the bound's pool; a label is final.
#[tokio::test]
async fn post_hoc_audits_of_a_finished_session_join_the_pool_and_change_no_state() {
    let app = spawn_app().await;
    let (session, agent) = audited_session(&app, 20, 0.0).await;
    let answers = work_all(&app, &agent, &session, 20).await;
    assert!(
        answers.iter().all(|a| a["state"] == "PASS"),
        "audit.rate 0 draws none"
    );
    assert_eq!(quality(&app, &session).await["unaudited"], 20);

    let reviewer = app.token("reviewer", "rita").await;
    let draw = |count: u32| {
        let app = &app;
        let session = session.clone();
        async move {
            let path = format!("/v1/sessions/{session}/audits");
            app.post(&path, &app.admin, json!({"count": count})).await
        }
    };
    draw(0).await.refused(422, "invalid_count");
    // Only an admin draws.
    let path = format!("/v1/sessions/{session}/audits");
    assert_eq!(
        app.post(&path, &reviewer, json!({"count": 1})).await.status,
        403
    );
    let drawn = draw(8).await.expect(201);
    let ids: Vec<String> = drawn["quests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q.as_str().unwrap().to_owned())
        .collect();
    assert_eq!((drawn["drawn"].as_u64(), ids.len()), (Some(8), 8));
    let pending = app.get(&path, &reviewer).await.expect(200);
    assert_eq!(pending.as_array().unwrap().len(), 8);
    assert_eq!(quality(&app, &session).await["pending_audits"], 8);

    for (i, id) in ids.iter().enumerate() {
        let body = match i {
            0 => json!({"decision": "reject", "note": "another company's address"}),
            _ => json!({"decision": "approve"}),
        };
        let label = app.post(&format!("/v1/audits/{id}"), &reviewer, body).await;
        assert_eq!(label.status, 204, "{}", label.body);
        assert_eq!(
            app.quest(id).await["state"],
            "PASS",
            "a label changes no state"
        );
    }
    // A reviewer token limited to another session labels none of these.
    let (elsewhere, _) = audited_session(&app, 1, 0.0).await;
    let body = json!({"name": "scoped", "role": "reviewer", "sessions": [elsewhere]});
    let scoped = app.post("/v1/tokens", &app.admin, body).await.expect(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let label = json!({"decision": "approve"});
    let refused = app
        .post(&format!("/v1/audits/{}", ids[1]), &scoped, label)
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let again = app
        .post(
            &format!("/v1/audits/{}", ids[0]),
            &reviewer,
            json!({"decision": "approve"}),
        )
        .await;
    again.refused(409, "audit_labelled");
    let not_drawn = answers
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .find(|id| !ids.iter().any(|d| d == id))
        .unwrap();
    app.post(
        &format!("/v1/audits/{not_drawn}"),
        &reviewer,
        json!({"decision": "approve"}),
    )
    .await
    .refused(404, "not_found");

    let q = quality(&app, &session).await;
    assert_eq!(
        (
            q["audited"].as_u64(),
            q["errors"].as_u64(),
            q["pending_audits"].as_u64(),
            q["unaudited"].as_u64()
        ),
        (Some(8), Some(1), Some(0), Some(12)),
        "{q}"
    );
    assert_eq!(
        q["covered"], 20,
        "a rejected post-hoc audit stays a PASS row: {q}"
    );
    assert_eq!(
        q["known_errors"], 1,
        "and is a known error on top of the bound: {q}"
    );
    assert!(
        q["summary"]
            .as_str()
            .unwrap()
            .contains("; 1 found wrong by audits or suspect are known errors"),
        "{q}"
    );
    // The rest are drawn; no quest is drawn twice.
    let rest = draw(100).await.expect(201);
    assert_eq!(rest["drawn"], 12);
    let rest: Vec<&str> = rest["quests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q.as_str().unwrap())
        .collect();
    assert!(
        rest.iter().all(|id| !ids.iter().any(|d| d == id)),
        "a quest is audited once"
    );
    assert_eq!(draw(1).await.expect(201)["drawn"], 0);
}

/// On every backend: raw SQL cannot change an audit's label once given nor
/// delete an audit, and no label moves the quest.
#[tokio::test]
async fn raw_sql_cannot_rewrite_an_audits_label() {
    let test = "raw_sql_cannot_rewrite_an_audits_label";
    for app in crate::ratchet::ratchet_apps(test).await {
        let (session, agent) = audited_session(&app, 2, 0.0).await;
        work_all(&app, &agent, &session, 2).await;
        let path = format!("/v1/sessions/{session}/audits");
        let drawn = app
            .post(&path, &app.admin, json!({"count": 1}))
            .await
            .expect(201);
        let id = drawn["quests"][0].as_str().unwrap().to_owned();
        let body = json!({"decision": "reject", "note": "wrong"});
        assert_eq!(
            app.post(&format!("/v1/audits/{id}"), &app.admin, body)
                .await
                .status,
            204
        );
        let mut db = crate::ratchet::raw(&app).await;
        let rewrite =
            format!("UPDATE audit_reviews SET decision = 'approve' WHERE quest_id = '{id}'");
        let err = db.execute(&rewrite).await.expect_err("a label is final");
        assert!(
            crate::ratchet::refused_by_a_rule(&err) && err.contains("label is final"),
            "{err}"
        );
        assert_eq!(app.quest(&id).await["state"], "PASS");
        let delete = format!("DELETE FROM audit_reviews WHERE quest_id = '{id}'");
        let err = db.execute(&delete).await.expect_err("an audit stays");
        assert!(err.contains("never deleted"), "{err}");
    }
}

/// A bulk approval of the audits decides them but labels nothing: nobody
/// looked at the rows.
#[tokio::test]
async fn a_bulk_approval_of_audits_is_no_label() {
    use crate::console::{form, post, sign_in};
    let app = spawn_app().await;
    let (session, agent) = audited_session(&app, 2, 1.0).await;
    let answers = work_all(&app, &agent, &session, 2).await;
    let rita = sign_in(&app, &app.token("reviewer", "rita").await).await;
    let mut fields = vec![
        ("csrf", rita.csrf.as_str()),
        ("decision", "approve"),
        ("session", session.as_str()),
    ];
    fields.extend(answers.iter().map(|a| ("quest", a["id"].as_str().unwrap())));
    post(&app, "/ui/review/bulk", Some(&rita), form(&fields), &[])
        .await
        .expect(200);
    let q = quality(&app, &session).await;
    assert_eq!(
        (q["covered"].as_u64(), q["decided_by_person"].as_u64()),
        (Some(0), Some(2)),
        "PASS rows a person decided without looking are not covered: {q}"
    );
    assert_eq!(
        (
            q["audited"].as_u64(),
            q["measured"].as_bool(),
            q["pending_audits"].as_u64()
        ),
        (Some(0), Some(false), Some(0)),
        "{q}"
    );
}
