//! Known answers (issue 22, points 1 and 2): gold items an operator adds to
//! a session are handed out by `next` in place of real quests, at the
//! session's rate and within each token's warm-up, never counted nor
//! exported; an agent token of such a session sees only its own work; each
//! token's answers to gold are compared per field and scored.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::helpers::{TestApp, assigned, companies, contact_config, spawn_app};

/// A session of `n` real quests with `gold` settings, and `golds` gold items
/// whose expected email is `gold<i>@firm.test` (compared case-folded).
pub(crate) async fn gold_session(app: &TestApp, n: usize, gold: Value, golds: usize) -> String {
    let mut config = contact_config(3);
    config["gold"] = gold;
    let session = app.scan(config, companies(n)).await;
    if golds > 0 {
        let email = |i| json!({"email": format!("gold{i}@firm.test")});
        let added = add_gold(
            app,
            &session,
            items(golds, email, json!({"email": "casefold"})),
        )
        .await;
        assert_eq!(added, json!({"added": golds, "items": golds}));
    }
    session
}

/// `n` gold items, `Gold 0000` … in Busan, item `i` expecting `expected(i)`,
/// compared by `compare`.
pub(crate) fn items(n: usize, expected: impl Fn(usize) -> Value, compare: Value) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({
                "input": {"company": format!("Gold {i:04}"), "city": "Busan"},
                "expected": expected(i),
                "compare": compare,
            })
        })
        .collect()
}

/// Adds gold items to a session as the admin; what the addition left.
pub(crate) async fn add_gold(app: &TestApp, session: &str, items: Vec<Value>) -> Value {
    let path = format!("/v1/sessions/{session}/gold");
    app.post(&path, &app.admin, json!({"items": items}))
        .await
        .expect(201)
}

pub(crate) fn is_gold(next: &Value) -> bool {
    next["quest"]["key"].as_str().unwrap().starts_with("Gold ")
}

/// Whether a UUID's text is a random one (version 4).
fn is_v4(id: &str) -> bool {
    uuid::Uuid::parse_str(id).unwrap().get_version_num() == 4
}

/// Works one assignment with the right answer (gold or real); whether it was gold.
pub(crate) async fn work_one(
    app: &TestApp,
    token: &str,
    session: &str,
    agent: &str,
) -> Option<bool> {
    let next = app.next(token, session, agent).await;
    if next["status"] != "assigned" {
        return None;
    }
    let gold = is_gold(&next);
    let (quest, lease) = assigned(&next);
    let key = next["quest"]["key"].as_str().unwrap().to_owned();
    let email = match key.strip_prefix("Gold ") {
        Some(i) => format!("GOLD{}@firm.test", i.parse::<u32>().unwrap()),
        None => format!("{}@firm.test", key.replace(' ', "")),
    };
    let answer = app
        .submit(
            token,
            &quest,
            &lease,
            json!({"email": email, "confidence": "high"}),
        )
        .await
        .expect(200);
    assert_eq!(answer["state"], "PASS", "{answer}");
    Some(gold)
}

#[tokio::test]
async fn gold_is_handed_out_in_each_warm_up_and_at_its_rate_never_twice_and_never_counted() {
    let app = spawn_app().await;
    let session = gold_session(&app, 300, json!({"rate": 0.2, "warmup": 3}), 120).await;
    // Every token's warm-up holds a gold quest.
    let mut warm_golds = 0;
    for t in 0..8 {
        let token = app.token("agent", &format!("warm-{t}")).await;
        let mut golds = 0;
        for _ in 0..3 {
            golds += u64::from(work_one(&app, &token, &session, "bot").await.unwrap());
        }
        assert!(golds >= 1, "token {t} had no gold in its warm-up");
        warm_golds += golds;
    }
    // Past it, gold comes at its rate, each item at most once per token.
    let token = app.token("agent", "steady").await;
    let (mut golds, mut keys) = (0u64, HashSet::new());
    for _ in 0..200 {
        let next = app.next(&token, &session, "bot").await;
        let (quest, lease) = assigned(&next);
        assert!(
            is_v4(&quest),
            "quest ids of a gold session are random: {quest}"
        );
        if is_gold(&next) {
            golds += 1;
            assert!(
                keys.insert(next["quest"]["key"].clone()),
                "an item twice: {next}"
            );
        }
        let result = json!({"email": "someone@firm.test", "confidence": "high"});
        app.submit(&token, &quest, &lease, result).await.expect(200);
    }
    // 197 draws at 0.2 past the warm-up, plus at most 3 in it: 39 expected, sd ≈ 5.6.
    assert!(
        (14..=75).contains(&golds),
        "{golds} gold quests in 200 assignments"
    );
    // Gold is never counted: the session's figures are its 300 real rows.
    let status = app.status(&session).await;
    let real = 8 * 3 + 200 - warm_golds - golds;
    assert_eq!(status["total"], 300);
    assert_eq!(status["pass"], real, "gold quests were counted: {status}");
    assert_eq!(status["remaining"], 300 - real, "{status}");
    // … nor exported.
    let (code, csv) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    assert_eq!(code, 200);
    let csv = String::from_utf8(csv).unwrap();
    assert_eq!(csv.lines().count(), 301);
    assert!(!csv.contains("Gold "), "a gold quest was exported");
    // The items count their hand-outs.
    let gold = app
        .get(&format!("/v1/sessions/{session}/gold"), &app.admin)
        .await
        .expect(200);
    let handed: u64 = gold["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["handed_out"].as_u64().unwrap())
        .sum();
    assert_eq!(gold["handed_out"], handed);
    assert_eq!(handed, warm_golds + golds, "{gold}");
}

#[tokio::test]
async fn gold_takes_the_place_of_an_open_real_quest_only() {
    let app = spawn_app().await;
    let session = gold_session(&app, 1, json!({"rate": 1.0, "warmup": 0}), 2).await;
    let first = app.token("agent", "first").await;
    // At rate 1 every assignment is gold while the token has items left, then real.
    assert_eq!(work_one(&app, &first, &session, "bot").await, Some(true));
    assert_eq!(work_one(&app, &first, &session, "bot").await, Some(true));
    let real = app.next(&first, &session, "bot").await;
    assert!(!is_gold(&real), "{real}");
    // Held, it is the agent's answer to `next` again.
    assert_eq!(
        app.next(&first, &session, "bot").await["quest"]["id"],
        real["quest"]["id"]
    );
    // With no real quest open, another token hears `wait`, not gold.
    let second = app.token("agent", "second").await;
    let next = app.next(&second, &session, "bot").await;
    assert_eq!(next["status"], "wait", "{next}");
    // A held gold quest is the answer to `next` until it is decided, and the agent's lease.
    let third_session = gold_session(&app, 5, json!({"rate": 1.0, "warmup": 0}), 1).await;
    let held = app.next(&second, &third_session, "bot").await;
    assert!(is_gold(&held));
    assert_eq!(
        app.next(&second, &third_session, "bot").await["quest"]["id"],
        held["quest"]["id"]
    );
    let lease = app
        .get(
            &format!("/v1/sessions/{third_session}/lease?agent=bot"),
            &second,
        )
        .await
        .expect(200);
    assert_eq!(lease["lease"]["quest_id"], held["quest"]["id"], "{lease}");
    assert_eq!(lease["lease"]["id"], held["lease"]["id"], "{lease}");
}

#[tokio::test]
async fn an_agent_token_of_a_gold_session_sees_only_its_own_work() {
    let app = spawn_app().await;
    let session = gold_session(&app, 20, json!({"rate": 0.5, "warmup": 2}), 10).await;
    let agent = app.token("agent", "bot").await;
    let viewer = app.token("viewer", "watcher").await;
    // The same fields and prompt for gold and real quests.
    let (mut gold, mut real) = (None, None);
    while gold.is_none() || real.is_none() {
        let next = app.next(&agent, &session, "bot").await;
        let (quest, lease) = assigned(&next);
        let keys: Vec<String> = next["quest"].as_object().unwrap().keys().cloned().collect();
        let prompt = next["prompt"]
            .as_str()
            .unwrap()
            .replace(next["quest"]["key"].as_str().unwrap(), "KEY");
        let shape = (
            keys,
            next["quest"]["session_id"].clone(),
            prompt.lines().count(),
        );
        let result = json!({"email": "a@firm.test", "confidence": "high"});
        let answer = app.submit(&agent, &quest, &lease, result).await.expect(200);
        let seen = (
            shape,
            answer
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>(),
            quest,
            answer["submission_id"].clone(),
        );
        if is_gold(&next) {
            gold.get_or_insert(seen);
        } else {
            real.get_or_insert(seen);
        }
    }
    let (gold, real) = (gold.unwrap(), real.unwrap());
    assert_eq!(
        gold.0, real.0,
        "a gold quest's assignment differs from a real one's"
    );
    assert_eq!(
        gold.1, real.1,
        "a gold quest's answer differs from a real one's"
    );
    assert_eq!(gold.0.1, json!(session), "a gold quest names its session");
    // Beyond its own work, the agent is refused: source, export, events, config, quests, gold.
    for path in [
        format!("/v1/sessions/{session}/source"),
        format!("/v1/sessions/{session}/export?format=csv"),
        format!("/v1/sessions/{session}/agents"),
        format!("/v1/sessions/{session}/quality"),
        format!("/v1/quests/{}", gold.2),
        format!("/v1/quests/{}", real.2),
    ] {
        app.get(&path, &agent).await.refused(403, "needs_viewer");
        app.get(&path, &viewer).await.expect(200);
    }
    let events = format!("/v1/sessions/{session}/events");
    app.get(&events, &agent).await.refused(403, "needs_viewer");
    // The items and their right answers are the admin's alone: a reviewer
    // who read them would know the answers of the gold quests it reviews.
    let items = format!("/v1/sessions/{session}/gold");
    assert_eq!(app.get(&items, &agent).await.status, 403);
    app.get(&items, &viewer).await.refused(403, "forbidden");
    app.get(&items, &app.admin).await.expect(200);
    // The session itself it may read without its gold settings, its figures reduced.
    let seen = app
        .get(&format!("/v1/sessions/{session}"), &agent)
        .await
        .expect(200);
    assert!(seen["config"].get("gold").is_none(), "{seen}");
    assert_eq!(seen["status"]["pass"], 0, "{seen}");
    let full = app
        .get(&format!("/v1/sessions/{session}"), &viewer)
        .await
        .expect(200);
    assert!(full["config"]["gold"].is_object(), "{full}");
    // Its submission to a gold quest names the session, and what remains of it.
    let poll = app
        .get(
            &format!("/v1/submissions/{}", gold.3.as_str().unwrap()),
            &agent,
        )
        .await
        .expect(200);
    assert_eq!(poll["session_id"], json!(session), "{poll}");
    assert_eq!(
        poll["remaining"],
        app.status(&session).await["remaining"],
        "{poll}"
    );
    // Its own submissions it may read, another token's not.
    let own = format!("/v1/submissions/{}", gold.3.as_str().unwrap());
    app.get(&own, &agent).await.expect(200);
    let other = app.token("agent", "other").await;
    app.get(&own, &other).await.refused(403, "needs_viewer");
    // The session list leaves it out, and its status says only what remains.
    let list = app.get("/v1/sessions", &agent).await.expect(200);
    assert!(!list.to_string().contains(&session), "{list}");
    let status = app
        .get(&format!("/v1/sessions/{session}/status"), &agent)
        .await
        .expect(200);
    let full = app.status(&session).await;
    assert_eq!(status["remaining"], full["remaining"]);
    assert_eq!(status["open"], 1);
    assert_eq!(status["finished"], false);
    assert_eq!(
        (status["pass"].clone(), status["submissions"].clone()),
        (json!(0), json!(0)),
        "{status}"
    );
    assert!(full["pass"].as_u64().unwrap() > 0);
    // A viewer sees the gold quest under its session.
    let view = app
        .get(&format!("/v1/quests/{}", gold.2), &viewer)
        .await
        .expect(200);
    assert_eq!(view["session_id"], json!(session));
}

#[tokio::test]
async fn gold_needs_a_gold_section_and_items_shaped_like_the_rows() {
    let app = spawn_app().await;
    let plain = app.scan(contact_config(3), companies(2)).await;
    let item = json!({"input": {"company": "Gold"}, "expected": {"email": "a@b.test"}});
    app.post(
        &format!("/v1/sessions/{plain}/gold"),
        &app.admin,
        json!({"items": [item]}),
    )
    .await
    .refused(422, "no_gold");
    let session = gold_session(&app, 2, json!({}), 0).await;
    let path = format!("/v1/sessions/{session}/gold");
    for (item, says) in [
        (
            json!({"input": {"firm": "x"}, "expected": {"email": "a@b.test"}}),
            "`firm`, which is not a column",
        ),
        (
            json!({"input": {"company": "x"}, "expected": {"email": "a@b.test"}}),
            "has no `city`",
        ),
        (
            json!({"input": {"company": " ", "city": "x"}, "expected": {"email": "a@b.test"}}),
            "input.company is empty",
        ),
        (
            json!({"input": {"company": "x", "city": "x"}, "expected": {}}),
            "expected is empty",
        ),
        (
            json!({"input": {"company": "x", "city": "x"}, "expected": {"email": "a@b.test"}, "compare": {"email": "fuzzy"}}),
            "items[0]: compare.email",
        ),
    ] {
        let answer = app.post(&path, &app.admin, json!({"items": [item]})).await;
        answer.refused(422, "invalid_gold");
        assert!(answer.body.to_string().contains(says), "{}", answer.body);
    }
    let agent = app.token("agent", "bot").await;
    app.post(&path, &agent, json!({"items": [item]}))
        .await
        .refused(403, "forbidden");
    // Nothing was added by the refusals.
    let gold = app.get(&path, &app.admin).await.expect(200);
    assert_eq!(gold["items"], json!([]));
    assert_eq!(
        gold["config"],
        json!({"rate": 0.05, "warmup": 3, "min_answers": 10})
    );
    // Settings out of range are refused at the scan, naming the field.
    for (gold, field) in [
        (json!({"rate": 1.5}), "config.gold.rate"),
        (json!({"min_accuracy": -0.1}), "config.gold.min_accuracy"),
        (json!({"min_answers": 0}), "config.gold.min_answers"),
    ] {
        let mut config = contact_config(3);
        config["gold"] = gold;
        let answer = app
            .post(
                "/v1/sessions",
                &app.admin,
                json!({"config": config, "items": companies(1)}),
            )
            .await;
        assert_eq!(answer.status, 422, "{}", answer.body);
        assert!(answer.body.to_string().contains(field), "{}", answer.body);
    }
}

#[tokio::test]
async fn quest_gold_adds_items_from_a_file_and_prints_the_scores() {
    let app = spawn_app().await;
    let session = gold_session(&app, 5, json!({"rate": 1.0, "warmup": 0}), 0).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gold.jsonl");
    let lines: Vec<String> = (0..3)
        .map(|i| {
            json!({"input": {"company": format!("Gold {i:04}"), "city": "Busan"},
                   "expected": {"email": format!("gold{i}@firm.test")}, "compare": {"email": "casefold"}})
                .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let ops = crate::cli::Shell::new(&app, &app.admin, Some(&session), "ops");
    let add = ops.run(&["gold", "add", file.to_str().unwrap()]).await;
    assert_eq!(add.code, 0, "{}", add.stderr);
    assert!(
        add.stdout
            .contains("added 3 gold items; the session holds 3"),
        "{}",
        add.stdout
    );
    let agent = app.token("agent", "scored").await;
    assert_eq!(work_one(&app, &agent, &session, "bot").await, Some(true));
    let scores = ops.run(&["gold", "scores"]).await;
    assert_eq!(scores.code, 0, "{}", scores.stderr);
    assert!(
        scores.stdout.contains("3 gold items, handed out 1 times"),
        "{}",
        scores.stdout
    );
    assert!(
        scores
            .stdout
            .contains("scored: 1 of 1 right, accuracy at least"),
        "{}",
        scores.stdout
    );
    // A file that holds no items is refused, and adds nothing.
    std::fs::write(&file, "{\"input\": 1}").unwrap();
    let bad = ops.run(&["gold", "add", file.to_str().unwrap()]).await;
    assert_eq!(bad.code, 64, "{}", bad.stderr);
    assert!(bad.stderr.contains("not gold items"), "{}", bad.stderr);
}

#[tokio::test]
async fn a_gold_quest_released_or_lapsed_comes_back_as_a_real_one_would() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 1.0, "warmup": 0});
    config["lease_seconds"] = json!(30);
    let session = app.scan(config, companies(5)).await;
    let items = items(3, |_| json!({"email": "x@firm.test"}), json!({}));
    add_gold(&app, &session, items).await;
    let agent = app.token("agent", "bot").await;
    let first = app.next(&agent, &session, "bot").await;
    assert!(is_gold(&first));
    let (quest, lease) = assigned(&first);
    let released = app
        .post(
            &format!("/v1/quests/{quest}/release"),
            &agent,
            json!({"lease_id": lease}),
        )
        .await;
    assert_eq!(released.status, 204, "{}", released.body);
    // Released, it is the next assignment again, with a new lease.
    let again = app.next(&agent, &session, "bot").await;
    assert_eq!(again["quest"]["id"], first["quest"]["id"], "{again}");
    assert_ne!(again["lease"]["id"], first["lease"]["id"]);
    // Lapsed, the same: swept, then handed back with one lapse.
    app.clock.advance(std::time::Duration::from_secs(31));
    let after = app.next(&agent, &session, "bot").await;
    assert_eq!(after["quest"]["id"], first["quest"]["id"], "{after}");
    let view = app.quest(after["quest"]["id"].as_str().unwrap()).await;
    assert_eq!(view["lapses"], 1, "{view}");
}

#[tokio::test]
async fn a_gold_expected_column_at_scan_time_makes_gold_items_and_leaves_no_trace_in_the_session() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 0, "warmup": 1});
    let csv = "company,city,gold_expected\n\
               Acme,Oslo,\n\
               Gold Ltd,Busan,\"{\"\"email\"\": \"\"sales@gold.test\"\"}\"\n\
               Beta,Rome,\n";
    let session = app
        .scan_file("firms.csv", csv.as_bytes().to_vec(), config.clone())
        .await
        .expect(201);
    let id = session["id"].as_str().unwrap();
    assert_eq!(session["columns"], json!(["company", "city"]), "{session}");
    assert_eq!(app.status(id).await["total"], 2);
    // The stored source holds the real rows only, without the column.
    let (_, source) = app.bytes(&format!("/v1/sessions/{id}/source")).await;
    assert_eq!(
        String::from_utf8(source).unwrap(),
        "company,city\nAcme,Oslo\nBeta,Rome\n"
    );
    let gold = app
        .get(&format!("/v1/sessions/{id}/gold"), &app.admin)
        .await
        .expect(200);
    assert_eq!(gold["items"].as_array().unwrap().len(), 1, "{gold}");
    assert_eq!(
        gold["items"][0]["input"],
        json!({"company": "Gold Ltd", "city": "Busan"})
    );
    assert_eq!(
        gold["items"][0]["expected"],
        json!({"email": "sales@gold.test"})
    );
    // The first assignment of a token is the gold row, shaped as a real one.
    let agent = app.token("agent", "first").await;
    let next = app.next(&agent, id, "bot").await;
    assert_eq!(
        next["quest"]["input"],
        json!({"company": "Gold Ltd", "city": "Busan"}),
        "{next}"
    );
    // A cell that is no JSON object is refused, naming its row.
    let bad = "company,city,gold_expected\nAcme,Oslo,\nGold Ltd,Busan,sales@gold.test\n";
    let refused = app
        .scan_file("bad.csv", bad.as_bytes().to_vec(), config)
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("row 3") && message.contains("gold_expected"),
        "{message}"
    );
}

#[tokio::test]
async fn gold_quests_are_never_an_email_gates_holders_of_an_address() {
    use quest::gates::email::EmailWorld;
    use quest::testing::{FakeFetcher, FakeResolver};
    use std::sync::Arc;
    let world = EmailWorld::new(
        Arc::new(FakeFetcher::new().html(
            "https://acme.test/contact",
            "<h1>Acme</h1><p>Mail info@acme.test.</p>",
        )),
        Arc::new(FakeResolver::new().with_mx("acme.test")),
    );
    let app = crate::helpers::spawn_app_with_world("", world).await;
    let config = json!({"key_column": "company", "gate": {"kind": "email"},
                        "gold": {"rate": 1.0, "warmup": 0}});
    let session = app
        .scan(config, json!([{"company": "Acme"}, {"company": "Beta"}]))
        .await;
    // A gold copy of the Acme row, whose right answer is Acme's address.
    let item = json!({"input": {"company": "Acme"}, "expected": {"email": "info@acme.test"}});
    add_gold(&app, &session, vec![item]).await;
    let result = json!({"site": "https://acme.test", "email": "info@acme.test",
                        "source": "https://acme.test/contact"});
    // Two tokens each get their own gold copy and give the same address:
    // neither holds it against the other.
    let mut tokens = Vec::new();
    for name in ["one", "two"] {
        let token = app.token("agent", name).await;
        let (quest, lease) = assigned(&app.next(&token, &session, "bot").await);
        let answer = app
            .submit(&token, &quest, &lease, result.clone())
            .await
            .expect(200);
        assert_eq!(answer["state"], "PASS", "{answer}");
        tokens.push(token);
    }
    // Nor does either hold it against the real Acme quest.
    let next = app.next(&tokens[0], &session, "bot").await;
    assert_eq!(next["quest"]["key"], "Acme", "{next}");
    let (quest, lease) = assigned(&next);
    let answer = app
        .submit(&tokens[0], &quest, &lease, result.clone())
        .await
        .expect(200);
    assert_eq!(answer["state"], "PASS", "{answer}");
    // A real quest does hold it: Beta with Acme's address is not a PASS.
    let next = app.next(&tokens[1], &session, "bot").await;
    assert_eq!(next["quest"]["key"], "Beta", "{next}");
    let (quest, lease) = assigned(&next);
    let answer = app
        .submit(&tokens[1], &quest, &lease, result)
        .await
        .expect(200);
    assert_ne!(answer["state"], "PASS", "{answer}");
}

#[tokio::test]
async fn a_gold_items_input_is_kept_in_the_sessions_column_order() {
    let app = spawn_app().await;
    let session = gold_session(&app, 5, json!({"rate": 0, "warmup": 1}), 0).await;
    // Given city first; the session's rows give company first.
    let item = json!({"input": {"city": "Busan", "company": "Gold 0000"},
                      "expected": {"email": "gold0@firm.test"}});
    add_gold(&app, &session, vec![item]).await;
    let agent = app.token("agent", "ordered").await;
    let next = app.next(&agent, &session, "bot").await;
    assert!(is_gold(&next), "{next}");
    let keys: Vec<&String> = next["quest"]["input"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["company", "city"], "{next}");
}
