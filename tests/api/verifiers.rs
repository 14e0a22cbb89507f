//! The verification cascade (L2) against fake OpenAI-compatible servers on
//! loopback: real HTTP, the real chat-completions shape. AI verifiers can only
//! raise doubt: they send a quest to REVIEW or let its L1 PASS stand. The
//! jobs across crashes and restarts are `verifiers_crash`'s; the backends'
//! tables and the refused `verify` blocks are `verifiers_config`'s.

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
pub(crate) fn verified_config(flag_threshold: u32, quorum: u32) -> Value {
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
pub(crate) async fn three(
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
        assert!(crate::ratchet::refused_by_a_rule(&err), "{sql}: {err}");
    }
    assert_eq!(app.quest(&quest).await["phase"], "verifying");
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
