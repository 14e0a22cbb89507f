//! The verification cascade (L2) against fake OpenAI-compatible servers on
//! loopback: real HTTP, the real chat-completions shape. AI verifiers can only
//! raise doubt: they send a quest to REVIEW or let its L1 PASS stand.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{Behaviour, FakeLlm, down_url};
use crate::helpers::*;

pub(crate) const QUESTION: &str = "Is the address a personal one rather than the company's own?";

/// `[verifiers.NAME]` tables for `(name, base_url, timeout_ms, max_concurrency)`.
pub(crate) fn verifiers_toml(backends: &[(&str, &str, u64, u32)]) -> String {
    backends
        .iter()
        .map(|(name, url, timeout_ms, concurrency)| {
            format!(
                "[verifiers.{name}]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"judge-{name}\"\n\
                 max_concurrency = {concurrency}\ntimeout_ms = {timeout_ms}\n\n"
            )
        })
        .collect()
}

/// The contact session of the helpers, with three verifiers.
fn verified_config(flag_threshold: u32, quorum: u32) -> Value {
    let mut config = contact_config(3);
    config["verify"] = json!({
        "verifiers": ["alpha", "beta", "gamma"],
        "questions": [QUESTION],
        "flag_threshold": flag_threshold,
        "quorum": quorum
    });
    config
}

/// Three fakes and an app that knows them, each fake with its own behaviour.
async fn three(
    alpha: Behaviour,
    beta: Behaviour,
    gamma: Behaviour,
    timeout_ms: u64,
) -> (TestApp, [FakeLlm; 3]) {
    let fakes = [
        FakeLlm::start("judge-alpha", alpha).await,
        FakeLlm::start("judge-beta", beta).await,
        FakeLlm::start("judge-gamma", gamma).await,
    ];
    let toml = verifiers_toml(&[
        ("alpha", &fakes[0].base_url, timeout_ms, 4),
        ("beta", &fakes[1].base_url, timeout_ms, 4),
        ("gamma", &fakes[2].base_url, timeout_ms, 4),
    ]);
    (spawn_app_with(&toml).await, fakes)
}

/// Leases the next quest and submits `result`; returns the quest id and the answer.
pub(crate) async fn submit_next(
    app: &TestApp,
    agent: &str,
    session: &str,
    result: Value,
) -> (String, Value) {
    let (quest, lease) = assigned(&app.next(agent, session, "a").await);
    let answer = app.submit(agent, &quest, &lease, result).await.expect(200);
    (quest, answer)
}

fn fact_checks(quest: &Value) -> Vec<String> {
    quest["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn three_verifiers_that_all_clear_lock_the_quest_pass_and_the_agent_moves_on() {
    let no = || Behaviour::says("NO: the address is on the company's own domain");
    let (app, fakes) = three(no(), no(), no(), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(2)).await;
    let (quest, answer) = submit_next(
        &app,
        &agent,
        &session,
        json!({"email": "info@acme.test", "confidence": "high"}),
    )
    .await;

    assert_eq!(
        (
            answer["verdict"].as_str(),
            answer["state"].as_str(),
            answer["phase"].as_str()
        ),
        (Some("PASS"), Some("TODO"), Some("verifying")),
        "PASS-pending: {answer}"
    );
    assert!(
        answer.get("lease").is_none(),
        "the quest is no longer the agent's: {answer}"
    );
    let (other, _) = assigned(&app.next(&agent, &session, "a").await);
    assert_ne!(other, quest, "the agent moves on to another quest");

    let view = app.settled(&quest).await;
    assert_eq!(
        (view["state"].as_str(), view["decided_by"].as_str()),
        (Some("PASS"), Some("gate"))
    );
    assert_eq!(
        view["receipt"], answer["receipt"],
        "the L1 receipt is the quest's"
    );
    assert_eq!(
        fact_checks(&view),
        ["l2:alpha", "l2:beta", "l2:gamma"],
        "every answer is a fact for the record"
    );
    let answers = view["l2_answers"].as_array().unwrap();
    assert_eq!(answers.len(), 3);
    for a in answers {
        assert_eq!(
            (a["answer"].as_str(), a["flagged"].as_bool()),
            (Some("no"), Some(false)),
            "{a}"
        );
        assert_eq!(a["question"], QUESTION);
        assert_eq!(
            a["model"],
            format!("judge-{}", a["verifier"].as_str().unwrap())
        );
        assert!(a["raw_reply"].as_str().unwrap().starts_with("NO:"));
    }
    for fake in &fakes {
        let requests = fake.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0]["messages"][0]["role"], "system");
        assert_eq!(requests[0]["temperature"].as_f64(), Some(0.0));
        assert_eq!(requests[0]["max_tokens"], 100);
    }

    let status = app.status(&session).await;
    assert_sums(&status);
    assert_eq!(
        (status["pass"].as_u64(), status["verifying"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(
        status["rate_per_minute"].as_f64().unwrap() > 0.0,
        "a verified quest counts as finished: {status}"
    );
    let figures = status["verifiers"].as_array().unwrap();
    assert_eq!(figures.len(), 3, "{status}");
    assert_eq!(figures[0]["verifier"], "alpha");
    assert_eq!(
        (
            figures[0]["answers"].as_u64(),
            figures[0]["no"].as_u64(),
            figures[0]["flags"].as_u64()
        ),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(figures[0]["flag_rate"], 0.0);
    let agreement = status["agreement"].as_array().unwrap();
    assert_eq!(agreement.len(), 3, "three pairs: {status}");
    assert!(
        agreement
            .iter()
            .all(|p| p["compared"] == 1 && p["rate"] == 1.0),
        "{status}"
    );

    let (code, text) = app.bytes("/metrics").await;
    assert_eq!(code.as_u16(), 200);
    let text = String::from_utf8(text).unwrap();
    for needle in [
        "quest_l2_answers_total{verifier=\"alpha\",answer=\"no\"}",
        "quest_l2_pair_compared_total{a=\"alpha\",b=\"beta\"}",
        "quest_l2_pair_agreed_total{a=\"beta\",b=\"gamma\"}",
        "quest_l2_latency_seconds",
    ] {
        assert!(text.contains(needle), "missing {needle} in /metrics");
    }
}

#[tokio::test]
async fn enough_flags_send_the_quest_to_review_with_the_facts_for_the_reviewer() {
    let yes = || Behaviour::says("YES: gmail.com is a free mail provider");
    let (app, _fakes) = three(yes(), yes(), Behaviour::says("NO: looks fine"), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let session = app.scan(verified_config(2, 2), companies(1)).await;
    let (quest, _) = submit_next(
        &app,
        &agent,
        &session,
        json!({"email": "ceo.acme@gmail.test", "confidence": "high"}),
    )
    .await;

    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "REVIEW");
    assert_eq!(view["tries"], 0, "L2 never changes tries");
    let checks = fact_checks(&view);
    assert!(
        checks.contains(&"l2:alpha".into()) && checks.contains(&"l2:beta".into()),
        "{checks:?}"
    );
    let gamma = view["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "l2:gamma")
        .expect("a clear answer is a fact for the reviewer too");
    assert_eq!(
        (gamma["actual"].as_str(), gamma["hint"].as_str()),
        (
            Some("NO: looks fine"),
            Some("this AI verifier raised no doubt")
        )
    );
    let threshold = view["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "l2")
        .expect("a fact says the threshold was reached");
    assert_eq!(threshold["expected"], "fewer than 2 flags");
    let alpha = view["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "l2:alpha")
        .unwrap();
    assert_eq!(alpha["actual"], "YES: gmail.com is a free mail provider");
    assert_eq!(
        alpha["hint"],
        "this AI verifier doubts the result; a person decides"
    );

    let queue = |check: &str| {
        let path = format!("/v1/review?session={session}&check={check}");
        let reviewer = reviewer.clone();
        let app = &app;
        async move { app.get(&path, &reviewer).await.expect(200) }
    };
    let listed = queue("l2:alpha").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(
        listed[0]["l2_answers"].as_array().unwrap().len(),
        3,
        "the reviewer sees every answer"
    );
    assert_eq!(queue("l2:*").await.as_array().unwrap().len(), 1);
    assert!(
        queue("l2:gamma").await.as_array().unwrap().is_empty(),
        "gamma's clear answer is a fact, but gamma raised no doubt"
    );
    assert!(queue("review_when").await.as_array().unwrap().is_empty());

    app.post(&format!("/v1/review/{quest}/claim"), &reviewer, json!({}))
        .await
        .expect(200);
    let decided = app
        .post(
            &format!("/v1/review/{quest}"),
            &reviewer,
            json!({"decision": "approve", "note": "the CEO uses it"}),
        )
        .await
        .expect(200);
    assert_eq!(
        (decided["state"].as_str(), decided["decided_by"].as_str()),
        (Some("PASS"), Some("reviewer:ana"))
    );
    assert_eq!(decided["reviews"][0]["note"], "the CEO uses it");

    let status = app.status(&session).await;
    let figures = status["verifiers"].as_array().unwrap();
    assert_eq!(figures[0]["flags"], 1);
    assert_eq!(figures[0]["flag_rate"], 1.0);
    let pairs = status["agreement"].as_array().unwrap();
    let rate = |a: &str, b: &str| {
        pairs
            .iter()
            .find(|p| p["verifiers"] == json!([a, b]))
            .unwrap()["rate"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(
        (
            rate("alpha", "beta"),
            rate("alpha", "gamma"),
            rate("beta", "gamma")
        ),
        (1.0, 0.0, 0.0)
    );
}

#[tokio::test]
async fn fewer_flags_than_the_threshold_lock_the_quest_pass() {
    let no = || Behaviour::says("NO");
    let (app, _fakes) = three(Behaviour::says("YES: maybe personal"), no(), no(), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(2, 2), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "PASS");
    assert_eq!(
        fact_checks(&view),
        ["l2:alpha", "l2:beta", "l2:gamma"],
        "every answer is on record, the minority doubt too"
    );
    let hint = view["last_facts"][0]["hint"].as_str().unwrap();
    assert!(
        hint.contains("passed without a person") && !hint.contains("should check"),
        "no person will look at a PASS, and the fact says so: {hint}"
    );
}

#[tokio::test]
async fn two_backends_down_is_review_for_lack_of_quorum() {
    let alpha = FakeLlm::start("judge-alpha", Behaviour::says("NO: fine")).await;
    let toml = verifiers_toml(&[
        ("alpha", &alpha.base_url, 5_000, 4),
        ("beta", &down_url(), 600, 4),
        ("gamma", &down_url(), 600, 4),
    ]);
    let app = spawn_app_with(&toml).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let session = app.scan(verified_config(1, 2), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;

    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "REVIEW");
    let listed = |check: &str| {
        let path = format!("/v1/review?session={session}&check={check}");
        let (app, reviewer) = (&app, reviewer.clone());
        async move {
            app.get(&path, &reviewer)
                .await
                .expect(200)
                .as_array()
                .unwrap()
                .len()
        }
    };
    assert_eq!(listed("l2:beta").await, 1, "no answer is a doubt");
    assert_eq!(listed("l2:alpha").await, 0, "alpha answered clear");
    let quorum = view["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "l2")
        .unwrap();
    assert_eq!(
        (quorum["expected"].as_str(), quorum["actual"].as_str()),
        (Some("at least 2 valid answers"), Some("1 of 3"))
    );
    for a in view["l2_answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["verifier"] != "alpha")
    {
        assert!(a["answer"].is_null() && a["raw_reply"].is_null(), "{a}");
        assert!(
            a["attempts"].as_u64().unwrap() > 1,
            "a refused connection is retried: {a}"
        );
        assert!(
            a["detail"]
                .as_str()
                .unwrap()
                .starts_with("no valid answer within 600 ms"),
            "{a}"
        );
    }
    let status = app.status(&session).await;
    let beta = status["verifiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["verifier"] == "beta")
        .unwrap()
        .clone();
    assert_eq!(
        (beta["no_answers"].as_u64(), beta["answers"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(beta["flag_rate"].is_null());
}

#[tokio::test]
async fn a_slow_backend_past_its_timeout_counts_as_no_answer() {
    let no = || Behaviour::says("NO");
    let slow = Behaviour::Slow(Duration::from_secs(30), "NO".into());
    let (app, _fakes) = three(no(), no(), slow, 400).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let view = app.settled(&quest).await;
    assert_eq!(
        view["state"], "PASS",
        "two valid answers meet the quorum of 2"
    );
    let gamma = view["l2_answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["verifier"] == "gamma")
        .unwrap()
        .clone();
    assert!(gamma["answer"].is_null(), "{gamma}");
    assert!(
        gamma["detail"]
            .as_str()
            .unwrap()
            .starts_with("no valid answer within 400 ms"),
        "{gamma}"
    );
    assert_eq!(fact_checks(&view), ["l2:alpha", "l2:beta", "l2:gamma"]);
    assert!(
        view["last_facts"][2]["actual"]
            .as_str()
            .unwrap()
            .starts_with("no answer: no valid answer within 400 ms"),
        "{view}"
    );
}

#[tokio::test]
async fn a_reply_that_is_neither_yes_nor_no_counts_as_no_answer() {
    let no = || Behaviour::says("NO: fine");
    let (app, _fakes) = three(
        no(),
        Behaviour::says("Maybe; it is hard to say."),
        no(),
        5_000,
    )
    .await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 3), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let view = app.settled(&quest).await;
    assert_eq!(
        view["state"], "REVIEW",
        "never a silent pass: the quorum of 3 is missed"
    );
    let beta = view["l2_answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["verifier"] == "beta")
        .unwrap()
        .clone();
    assert_eq!(beta["raw_reply"], "Maybe; it is hard to say.");
    assert!(beta["answer"].is_null());
    assert!(
        beta["detail"]
            .as_str()
            .unwrap()
            .starts_with("not an answer"),
        "{beta}"
    );
    assert_eq!(beta["attempts"], 1, "a reply is not retried");
}

#[tokio::test]
async fn hedged_replies_that_start_with_yes_or_no_are_no_answers_and_miss_the_quorum() {
    let (app, _fakes) = three(
        Behaviour::says("No idea, the snippet does not say."),
        Behaviour::says("Yes and no: it depends"),
        Behaviour::says("NO ANSWER"),
        5_000,
    )
    .await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 3), companies(1)).await;
    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "REVIEW", "a hedge never passes a quest");
    for a in view["l2_answers"].as_array().unwrap() {
        assert!(a["answer"].is_null(), "{a}");
        assert_eq!(a["flagged"], false, "{a}");
    }
    let quorum = view["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "l2")
        .unwrap();
    assert_eq!(
        (quorum["expected"].as_str(), quorum["actual"].as_str()),
        (Some("at least 3 valid answers"), Some("0 of 3"))
    );
}

#[tokio::test]
async fn a_verifier_sees_only_the_contract_and_the_declared_fields_never_free_text_or_earlier_attempts()
 {
    let no = || Behaviour::says("NO");
    let (app, fakes) = three(no(), no(), no(), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let failed = app
        .submit(
            &agent,
            &quest,
            &lease,
            json!({"email": "earlier-attempt-marker"}),
        )
        .await
        .expect(200);
    assert_eq!(failed["verdict"], "FAIL");
    let result = json!({
        "email": "info@acme.test",
        "confidence": "high",
        "notes": "trust me, it is right",
        "reasoning": "I am very sure"
    });
    app.submit(&agent, &quest, &lease, result).await.expect(200);
    let view = app.settled(&quest).await;
    assert_eq!(view["state"], "PASS");
    assert_eq!(view["tries"], 1);

    for fake in &fakes {
        let requests = fake.requests();
        assert_eq!(requests.len(), 1, "the FAIL never reached a verifier");
        let sent = requests[0].to_string();
        for never in [
            "trust me",
            "I am very sure",
            "notes",
            "reasoning",
            "earlier-attempt-marker",
        ] {
            assert!(
                !sent.contains(never),
                "{never:?} reached a verifier: {sent}"
            );
        }
        let prompt = requests[0]["messages"][1]["content"].as_str().unwrap();
        for needed in [
            "Find the contact email of the company.",
            "Company 0000",
            "Seoul",
            "info@acme.test",
            QUESTION,
        ] {
            assert!(prompt.contains(needed), "missing {needed:?} in\n{prompt}");
        }
    }
}

#[tokio::test]
async fn an_l1_fail_or_review_never_reaches_a_verifier_and_l2_cannot_change_them() {
    let yes = || Behaviour::says("YES: everything is wrong");
    let (app, fakes) = three(yes(), yes(), yes(), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(3)).await;
    let as_agent = |name: &'static str, result: Value| {
        let (app, agent, session) = (&app, agent.clone(), session.clone());
        async move {
            let (quest, lease) = assigned(&app.next(&agent, &session, name).await);
            (
                quest.clone(),
                app.submit(&agent, &quest, &lease, result).await.expect(200),
            )
        }
    };
    let (failing, answer) = as_agent("a", json!({"email": "no-at-sign"})).await;
    assert_eq!(
        (answer["verdict"].as_str(), answer["state"].as_str()),
        (Some("FAIL"), Some("TODO"))
    );
    let (grey, answer) = as_agent("b", json!({"email": "a@b.test", "confidence": "low"})).await;
    assert_eq!(answer["state"], "REVIEW");

    // A third quest passes L1 and is verified, so the workers have certainly run.
    let (passing, _) = as_agent("c", json!({"email": "c@d.test", "confidence": "high"})).await;
    assert_eq!(app.settled(&passing).await["state"], "REVIEW");
    for fake in &fakes {
        assert_eq!(fake.requests().len(), 1, "only the L1 PASS was sent");
    }
    let view = app.quest(&grey).await;
    assert_eq!(view["state"], "REVIEW");
    assert!(view["l2_answers"].as_array().unwrap().is_empty());
    assert_eq!(app.quest(&failing).await["tries"], 1);
}

#[tokio::test]
async fn a_verifying_quest_is_no_longer_the_agents_and_the_database_refuses_any_l2_shortcut() {
    let hang = || Behaviour::Hang;
    let (app, _fakes) = three(hang(), hang(), hang(), 60_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(1)).await;
    let (quest, lease) = assigned(&app.next(&agent, &session, "a").await);
    let result = json!({"email": "info@acme.test"});
    let first = app
        .submit(&agent, &quest, &lease, result.clone())
        .await
        .expect(200);
    assert_eq!(first["phase"], "verifying");

    let retry = app.submit(&agent, &quest, &lease, result).await.expect(200);
    assert_eq!(
        retry["submission_id"], first["submission_id"],
        "the identical retry is answered again"
    );
    app.submit(&agent, &quest, &lease, json!({"email": "other@acme.test"}))
        .await
        .refused(409, "quest_verifying");
    app.post(
        &format!("/v1/quests/{quest}/heartbeat"),
        &agent,
        json!({"lease_id": lease}),
    )
    .await
    .refused(409, "quest_verifying");
    let next = app.next(&agent, &session, "a").await;
    assert_eq!(
        next["status"], "wait",
        "the only quest is being verified: {next}"
    );
    let status = app.status(&session).await;
    assert_sums(&status);
    assert_eq!(
        (status["verifying"].as_u64(), status["remaining"].as_u64()),
        (Some(1), Some(1))
    );

    let mut db = crate::ratchet::raw(&app).await;
    for sql in [
        format!("UPDATE quests SET tries = tries + 1 WHERE id = '{quest}'"),
        format!("UPDATE quests SET state = 'DONE', phase = NULL WHERE id = '{quest}'"),
        format!("UPDATE quests SET phase = 'open' WHERE id = '{quest}'"),
        format!("UPDATE quests SET result = '{{\"email\":\"evil@x.test\"}}' WHERE id = '{quest}'"),
        format!("UPDATE l2_jobs SET verifier = 'delta' WHERE quest_id = '{quest}'"),
        format!("DELETE FROM l2_jobs WHERE quest_id = '{quest}'"),
    ] {
        let err = db.execute(&sql).await.expect_err(&sql);
        assert!(err.contains("ratchet"), "{sql}: {err}");
    }
    assert_eq!(app.quest(&quest).await["phase"], "verifying");
}

#[tokio::test]
async fn pending_jobs_finish_after_a_restart_and_end_pass_or_review() {
    let hang = || Behaviour::Hang;
    let (app, hanging) = three(hang(), hang(), hang(), 60_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(2)).await;
    let (clean, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    let (doubtful, _) =
        submit_next(&app, &agent, &session, json!({"email": "boss@gmail.test"})).await;
    for fake in &hanging {
        for _ in 0..500 {
            if fake.requests().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(fake.requests().len(), 2, "both quests were being verified");
    }
    assert_eq!(app.status(&session).await["verifying"], 2);
    let dir = app.stop().await;
    drop(hanging);

    let judge = || {
        Behaviour::flags_when(
            "gmail.test",
            "YES: a free mail address",
            "NO: the company's own",
        )
    };
    let fakes = [
        FakeLlm::start("judge-alpha-2", judge()).await,
        FakeLlm::start("judge-beta-2", judge()).await,
        FakeLlm::start("judge-gamma-2", judge()).await,
    ];
    let toml = verifiers_toml(&[
        ("alpha", &fakes[0].base_url, 5_000, 4),
        ("beta", &fakes[1].base_url, 5_000, 4),
        ("gamma", &fakes[2].base_url, 5_000, 4),
    ]);
    let app = spawn_app_in_with(dir, Some(&toml)).await;
    assert_eq!(app.settled(&clean).await["state"], "PASS");
    let view = app.settled(&doubtful).await;
    assert_eq!(view["state"], "REVIEW");
    assert_eq!(view["tries"], 0);
    for fake in &fakes {
        assert_eq!(
            fake.requests().len(),
            2,
            "the restarted server asked the new backends"
        );
    }
    let status = app.status(&session).await;
    assert_sums(&status);
    assert_eq!(
        (
            status["pass"].as_u64(),
            status["review"].as_u64(),
            status["remaining"].as_u64()
        ),
        (Some(1), Some(1), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_verifiers_work_loses_no_job_and_the_quests_end_pass_or_review() {
    use crate::server::{Server, call};
    let hang = || Behaviour::Hang;
    let hanging = [
        FakeLlm::start("judge-alpha", hang()).await,
        FakeLlm::start("judge-beta", hang()).await,
        FakeLlm::start("judge-gamma", hang()).await,
    ];
    let (data, etc) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_file = etc.path().join("quest.toml");
    let toml = |fakes: &[FakeLlm; 3]| {
        verifiers_toml(&[
            ("alpha", &fakes[0].base_url, 60_000, 4),
            ("beta", &fakes[1].base_url, 60_000, 4),
            ("gamma", &fakes[2].base_url, 60_000, 4),
        ])
    };
    std::fs::write(&config_file, toml(&hanging)).unwrap();
    let mut server = Server::start_with(data.path(), Some(&config_file)).await;
    let client = reqwest::Client::new();
    let (status, session) = call(
        &client,
        &server.base,
        "/v1/sessions",
        json!({"config": verified_config(1, 2), "items": companies(2)}),
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{session}");
    let session = session["id"].as_str().unwrap().to_owned();
    let mut quests = Vec::new();
    for (name, email) in [("a", "info@acme.test"), ("b", "boss@gmail.test")] {
        let (_, next) = call(
            &client,
            &server.base,
            &format!("/v1/sessions/{session}/next"),
            json!({"agent": name}),
        )
        .await
        .unwrap();
        let (quest, lease) = assigned(&next);
        let (status, answer) = call(
            &client,
            &server.base,
            &format!("/v1/quests/{quest}/submit"),
            json!({"lease_id": lease, "result": {"email": email}}),
        )
        .await
        .unwrap();
        assert_eq!(
            (status, answer["phase"].as_str()),
            (200, Some("verifying")),
            "{answer}"
        );
        quests.push(quest);
    }
    for fake in &hanging {
        for _ in 0..500 {
            if fake.requests().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            fake.requests().len(),
            2,
            "the verifiers were asked before the crash"
        );
    }
    server.kill().await;

    let judge = || {
        Behaviour::flags_when(
            "gmail.test",
            "YES: a free mail address",
            "NO: the company's own",
        )
    };
    let answering = [
        FakeLlm::start("judge-alpha", judge()).await,
        FakeLlm::start("judge-beta", judge()).await,
        FakeLlm::start("judge-gamma", judge()).await,
    ];
    std::fs::write(&config_file, toml(&answering)).unwrap();
    let server = Server::start_with(data.path(), Some(&config_file)).await;
    let mut states = Vec::new();
    for quest in &quests {
        let mut view = Value::Null;
        for _ in 0..1500 {
            view = client
                .get(format!("{}/v1/quests/{quest}", server.base))
                .bearer_auth(crate::server::ADMIN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if view["state"] != "TODO" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(view["tries"], 0, "{view}");
        assert_eq!(view["l2_answers"].as_array().unwrap().len(), 3, "{view}");
        states.push(view["state"].as_str().unwrap().to_owned());
    }
    assert_eq!(states, ["PASS", "REVIEW"]);
    for fake in &answering {
        assert_eq!(fake.requests().len(), 2);
    }
}

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
        "[verifiers.local]\nkind = \"command\"\nargv = [\"/bin/sh\", \"{}\"]\nenv = [\"PATH\"]\nmodel = \"house-rules\"\ntimeout_ms = 10000\n",
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
        1,
        "the schema gate's default question is stored: {created}"
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

#[tokio::test]
async fn an_answer_the_store_failed_to_record_is_retried_without_asking_the_backend_again() {
    let no = || Behaviour::says("NO: the company's own domain");
    let (app, fakes) = three(no(), no(), no(), 5_000).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(1)).await;

    // Every attempt to record an answer fails until the trigger is dropped.
    let mut db = crate::ratchet::raw(&app).await;
    let injected = if app.database_url.is_some() {
        vec![
            "CREATE FUNCTION test_store_fails() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'injected store failure'; END $$",
            "CREATE TRIGGER test_store_fails BEFORE INSERT ON l2_answers
             FOR EACH ROW EXECUTE FUNCTION test_store_fails()",
        ]
    } else {
        vec![
            "CREATE TRIGGER test_store_fails BEFORE INSERT ON l2_answers
             BEGIN SELECT RAISE(ABORT, 'injected store failure'); END",
        ]
    };
    for sql in injected {
        db.execute(sql).await.unwrap();
    }

    let (quest, _) = submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
    for fake in &fakes {
        for _ in 0..500 {
            if !fake.requests().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fake.requests().len(), 1, "every verifier was asked");
    }
    // Long enough for the first attempts to record to fail.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.quest(&quest).await["phase"], "verifying");
    let drop = if app.database_url.is_some() {
        "DROP TRIGGER test_store_fails ON l2_answers"
    } else {
        "DROP TRIGGER test_store_fails"
    };
    db.execute(drop).await.unwrap();

    let view = app.settled(&quest).await;
    assert_eq!(
        view["state"], "PASS",
        "the answers were recorded on a retry"
    );
    assert_eq!(view["l2_answers"].as_array().unwrap().len(), 3);
    for fake in &fakes {
        assert_eq!(
            fake.requests().len(),
            1,
            "the answer is kept across the retries, not asked for again"
        );
    }
}

#[tokio::test]
async fn a_restart_with_submissions_still_being_checked_asks_each_verifier_each_question_once() {
    use quest::store::{NewSubmission, SubmitOutcome};
    let no = || Behaviour::says("NO: the company's own domain");
    let fakes = [
        FakeLlm::start("judge-alpha", no()).await,
        FakeLlm::start("judge-beta", no()).await,
        FakeLlm::start("judge-gamma", no()).await,
    ];
    let toml = verifiers_toml(&[
        ("alpha", &fakes[0].base_url, 5_000, 4),
        ("beta", &fakes[1].base_url, 5_000, 4),
        ("gamma", &fakes[2].base_url, 5_000, 4),
    ]);
    const N: usize = 12;
    let app = spawn_app_with(&toml).await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(verified_config(1, 2), companies(N)).await;
    let mut leased = Vec::new();
    for i in 0..N {
        leased.push(assigned(
            &app.next(&agent, &session, &format!("a{i}")).await,
        ));
    }
    let dir = app.stop().await;

    // Submissions recorded the way `submit` does, with no gate running: as if
    // the server died between the durable write and the verdict.
    let store = open_store_of(dir.path()).await;
    let bot = store
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "bot")
        .unwrap();
    for (i, (quest, lease)) in leased.iter().enumerate() {
        let result = json!({"email": format!("info{i}@acme.test")});
        let recorded = store
            .submit(
                NewSubmission {
                    quest_id: quest.parse().unwrap(),
                    lease_id: lease.parse().unwrap(),
                    token_id: bot.id,
                    result_hash: quest::domain::receipt::digest(&result),
                    result,
                },
                None,
            )
            .await
            .unwrap();
        assert!(matches!(recorded, SubmitOutcome::Recorded { .. }));
    }
    drop(store);

    let app = spawn_app_in_with(dir, Some(&toml)).await;
    for (quest, _) in &leased {
        assert_eq!(app.settled(quest).await["state"], "PASS");
    }
    for fake in &fakes {
        assert_eq!(
            fake.requests().len(),
            N,
            "each verifier is asked each question of each quest exactly once"
        );
    }
    let status = app.status(&session).await;
    for figures in status["verifiers"].as_array().unwrap() {
        assert_eq!(figures["answers"], N, "{status}");
    }
}

#[tokio::test]
async fn a_job_queued_twice_or_run_again_after_its_answer_is_asked_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use quest::domain::Verdict;
    use quest::domain::session::SessionConfig;
    use quest::domain::table::Row;
    use quest::domain::verify::{Artifact, Contract, Question, VerifierRequest, parse_reply};
    use quest::store::{
        GateDecision, LeaseOutcome, NewSession, NewSubmission, SqliteStore, Store, SubmitOutcome,
    };
    use quest::verifiers::{AskError, Reply, Verifier, VerifierRegistry};
    use quest::workers::VerifierRunner;

    /// Answers NO after a pause long enough for a duplicate to start too.
    struct Counting(AtomicUsize);

    #[async_trait]
    impl Verifier for Counting {
        fn model(&self) -> &str {
            "counting"
        }
        async fn ask(&self, _: &VerifierRequest, _: &Question) -> Result<Reply, AskError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(Reply {
                raw: "NO: fine".into(),
                parsed: parse_reply("NO: fine"),
            })
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(
            &dir.path().join("q.db"),
            Arc::new(quest::domain::SystemClock),
            tokio::sync::broadcast::channel(64).0,
        )
        .await
        .unwrap(),
    );
    let token = store
        .create_token("bot", quest::domain::Role::Agent, "hash", None)
        .await
        .unwrap();
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha"], "questions": [QUESTION]});
    let input = json!({"company": "Acme"}).as_object().unwrap().clone();
    let session = store
        .create_session(NewSession {
            id: quest::domain::ids::SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(config).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows: vec![("Acme".into(), Row::from_map(&input))],
        })
        .await
        .unwrap();
    let LeaseOutcome::Assigned { quest, lease, .. } = store
        .lease_next(
            session.id,
            &quest::domain::work::AgentId::new(token.id, "bot"),
        )
        .await
        .unwrap()
    else {
        panic!("a quest is open")
    };
    let result = json!({"email": "info@acme.test"});
    let SubmitOutcome::Recorded { view, .. } = store
        .submit(
            NewSubmission {
                quest_id: quest.id,
                lease_id: lease.id,
                token_id: token.id,
                result_hash: quest::domain::receipt::digest(&result),
                result: result.clone(),
            },
            None,
        )
        .await
        .unwrap()
    else {
        panic!("recorded")
    };
    let submission = view.submission;
    let decided = store
        .apply_verdict(
            submission.id,
            GateDecision {
                verdict: Verdict::Pass,
                facts: vec![],
                evidence: vec![],
                gate: "schema".into(),
                gate_version: "1".into(),
                receipt: "receipt".into(),
                verify: Some(VerifierRequest {
                    contract: Contract {
                        task: "Find the contact email.".into(),
                        input: json!({"company": "Acme"}),
                    },
                    artifact: Artifact {
                        result,
                        evidence: vec![],
                    },
                }),
            },
        )
        .await
        .unwrap();
    assert_eq!(decided.l2_jobs.len(), 1);

    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let mut registry = VerifierRegistry::default();
    registry.insert("alpha", counting.clone(), 4, Duration::from_secs(5));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let runner = VerifierRunner::start(store.clone(), Arc::new(registry), shutdown.clone());
    runner.enqueue(decided.l2_jobs.clone());
    runner.enqueue(decided.l2_jobs.clone());
    for _ in 0..500 {
        if store.get_quest(quest.id).await.unwrap().state != quest::domain::State::Todo {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        store.get_quest(quest.id).await.unwrap().state,
        quest::domain::State::Pass
    );
    assert!(
        runner.run_once(decided.l2_jobs[0]).await.unwrap().is_none(),
        "an answered job is not run again"
    );
    assert_eq!(counting.0.load(Ordering::SeqCst), 1, "asked exactly once");
    shutdown.cancel();
}

#[tokio::test]
async fn a_verifier_reads_the_task_rendered_for_the_quest_or_else_the_gates_own_task() {
    let fake = FakeLlm::start("judge", Behaviour::says("NO: fine")).await;
    let app = spawn_app_with(&verifiers_toml(&[("alpha", &fake.base_url, 5_000, 4)])).await;
    let agent = app.token("agent", "bot").await;
    let mut templated = contact_config(3);
    templated["prompt"]["instructions"] =
        json!("Find the contact email of {{ company }} in {{ city }}.");
    templated["verify"] = json!({"verifiers": ["alpha"], "questions": [QUESTION]});
    let mut plain = templated.clone();
    plain["prompt"]["instructions"] = json!("");
    for config in [templated, plain] {
        let session = app.scan(config, companies(1)).await;
        let (quest, _) =
            submit_next(&app, &agent, &session, json!({"email": "info@acme.test"})).await;
        assert_eq!(app.settled(&quest).await["state"], "PASS");
    }
    let requests = fake.requests();
    let task = |i: usize| {
        let prompt = requests[i]["messages"][1]["content"].as_str().unwrap();
        let start =
            prompt.find("# Contract\n\n## Task\n").unwrap() + "# Contract\n\n## Task\n".len();
        prompt[start..prompt.find("\n\n## Input").unwrap()].to_owned()
    };
    assert_eq!(
        task(0),
        "Find the contact email of Company 0000 in Seoul.",
        "the template rendered for the quest, not the raw template"
    );
    assert!(
        task(1).starts_with("Produce the result for the input below as one JSON object"),
        "an empty task falls back to the gate's own: {}",
        task(1)
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
