//! What the answers to gold say (issue 22, points 2 and 3): each token's
//! score with its lower bound, each AI verifier's on the answers to gold,
//! and the floor under which a token is paused and its gate PASSes marked
//! suspect.

use serde_json::{Value, json};

use crate::gold::{add_gold, gold_session, is_gold, items, work_one};
use crate::helpers::{assigned, companies, contact_config, spawn_app};

#[tokio::test]
async fn gold_answers_are_compared_per_field_and_score_their_token() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 1.0, "warmup": 0});
    let session = app.scan(config, companies(30)).await;
    let expected = |i| json!({"email": format!("Gold{i}@Firm.test"), "confidence": "high"});
    let items = items(12, expected, json!({"email": "casefold"}));
    add_gold(&app, &session, items).await;
    let good = app.token("agent", "good").await;
    let sloppy = app.token("agent", "sloppy").await;
    for (token, wrong_every) in [(&good, None), (&sloppy, Some(2))] {
        for n in 0..12 {
            let next = app.next(token, &session, "bot").await;
            assert!(is_gold(&next), "{next}");
            let (quest, lease) = assigned(&next);
            let i: u32 = next["quest"]["key"].as_str().unwrap()[5..].parse().unwrap();
            let email = if wrong_every.is_some_and(|k| n % k == 1) {
                format!("other{i}@firm.test")
            } else {
                format!("  gold{i}@FIRM.test ")
            };
            app.submit(
                token,
                &quest,
                &lease,
                json!({"email": email.trim(), "confidence": "high"}),
            )
            .await
            .expect(200);
        }
    }
    let gold = app
        .get(&format!("/v1/sessions/{session}/gold"), &app.admin)
        .await
        .expect(200);
    let tokens = gold["tokens"].as_array().unwrap();
    let score = |name: &str| tokens.iter().find(|t| t["token"] == name).unwrap().clone();
    let (g, s) = (score("good"), score("sloppy"));
    assert_eq!(
        (g["answered"].clone(), g["correct"].clone()),
        (json!(12), json!(12)),
        "{g}"
    );
    assert_eq!(
        (s["answered"].clone(), s["correct"].clone()),
        (json!(12), json!(6)),
        "{s}"
    );
    assert_eq!(g["agents"], json!(["bot"]));
    // The session's agents carry the same scores, by token.
    let agents = app
        .get(&format!("/v1/sessions/{session}/agents"), &app.admin)
        .await
        .expect(200);
    let of = |name: &str| {
        let tokens = agents["tokens"].as_array().unwrap();
        tokens.iter().find(|t| t["token"] == name).unwrap()["gold"].clone()
    };
    for (name, score) in [("good", &g), ("sloppy", &s)] {
        let block = of(name);
        for field in ["answered", "correct", "accuracy_lower_bound"] {
            assert_eq!(block[field], score[field], "{name}: {agents}");
        }
    }
    // One-sided 95% Wilson lower bounds, computed here apart: 12/12 and 6/12.
    let wilson = |k: f64, n: f64| {
        let (z, p) = (1.645_f64, k / n);
        (p + z * z / (2.0 * n) - z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt())
            / (1.0 + z * z / n)
    };
    for (t, k) in [(&g, 12.0), (&s, 6.0)] {
        let bound = t["accuracy_lower_bound"].as_f64().unwrap();
        assert!((bound - wilson(k, 12.0)).abs() < 1e-9, "{t}");
    }
}

#[tokio::test]
async fn a_token_under_the_gold_floor_is_paused_with_its_gate_passes_marked_suspect_until_resumed()
{
    let app = spawn_app().await;
    // 8 right of 8 is at least 74.6% (one-sided 95%), 0 of 8 at least 0%.
    // At rate 0.3 the chance that no real quest falls between the first and
    // the eighth gold one is 0.3^7, about 2 in 10,000.
    let floor = json!({"rate": 0.3, "warmup": 0, "min_accuracy": 0.5, "min_answers": 8});
    let session = gold_session(&app, 150, floor, 40).await;
    let sloppy = app.token("agent", "sloppy").await;
    let careful = app.token("agent", "careful").await;
    // The sloppy token's real results pass the gate; its gold answers are wrong.
    let (mut real, mut golds, mut paused) = (Vec::new(), 0, None);
    for _ in 0..150 {
        let next = app
            .post(
                &format!("/v1/sessions/{session}/next"),
                &sloppy,
                json!({"agent": "bot"}),
            )
            .await;
        if next.status == 409 {
            paused = Some(next);
            break;
        }
        let next = next.expect(200);
        let (quest, lease) = assigned(&next);
        let result = json!({"email": "someone@firm.test", "confidence": "high"});
        app.submit(&sloppy, &quest, &lease, result)
            .await
            .expect(200);
        if is_gold(&next) {
            golds += 1;
        } else {
            real.push((quest, golds));
        }
        assert!(work_one(&app, &careful, &session, "bot").await.is_some());
        // Time passes between decisions, as it does.
        app.clock.advance(std::time::Duration::from_secs(1));
    }
    let paused = paused.expect("the sloppy token is paused");
    paused.refused(409, "agent_paused");
    assert_eq!(
        paused.body["pause"]["reason"], "unqualified",
        "{}",
        paused.body
    );
    let figures = &paused.body["pause"]["figures"];
    assert_eq!(
        (figures["answered"].clone(), figures["correct"].clone()),
        (json!(8), json!(0))
    );
    assert_eq!(figures["min_accuracy"], 0.5);
    assert_eq!(golds, 8);
    // Its gate PASSes since its first wrong gold answer are suspect, and stay PASS.
    let mut suspects = 0;
    for (quest, golds_before) in &real {
        let view = app.quest(quest).await;
        assert_eq!(view["state"], "PASS");
        assert_eq!(view["suspect"], json!(*golds_before > 0), "{view}");
        suspects += usize::from(*golds_before > 0);
    }
    assert!(
        suspects > 0,
        "no PASS followed a wrong gold answer: {real:?}"
    );
    assert_eq!(app.status(&session).await["suspect"], suspects);
    let (_, csv) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    let mut reader = csv::Reader::from_reader(csv.as_slice());
    let header = reader.headers().unwrap().clone();
    let column = header.iter().position(|h| h == "quest_suspect").unwrap();
    assert_eq!(header.get(column + 1), Some("quest_audit"));
    let marked = reader
        .records()
        .filter(|r| &r.as_ref().unwrap()[column] == "true")
        .count();
    assert_eq!(marked, suspects);
    // The careful token is never paused; the sloppy one works again once resumed.
    assert!(work_one(&app, &careful, &session, "bot").await.is_some());
    let token = paused.body["pause"]["token_id"].as_str().unwrap();
    app.post(
        &format!("/v1/sessions/{session}/tokens/{token}/resume"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(200);
    assert!(work_one(&app, &sloppy, &session, "bot").await.is_some());
}

#[tokio::test]
async fn each_ai_verifier_is_scored_on_the_answers_to_gold_apart_from_its_calibration() {
    use crate::fake_llm::{Behaviour, FakeLlm};
    use std::sync::Arc;
    // alpha flags the results that are wrong; beta never flags.
    let alpha = FakeLlm::start(
        "judge-alpha",
        Behaviour::Reply(Arc::new(|prompt| {
            if prompt.contains("wrong") {
                "YES: a doubt".into()
            } else {
                "NO: fine".into()
            }
        })),
    )
    .await;
    let beta = FakeLlm::start(
        "judge-beta",
        Behaviour::Reply(Arc::new(|_| "NO: fine".into())),
    )
    .await;
    let toml = crate::verifiers::verifiers_toml(&[
        ("alpha", &alpha.base_url, 5_000, 4),
        ("beta", &beta.base_url, 5_000, 4),
    ]);
    let app = crate::helpers::spawn_app_with(&toml).await;
    let mut config = contact_config(3);
    config["gold"] = json!({"rate": 1.0, "warmup": 0});
    config["verify"] = json!({"verifiers": ["alpha", "beta"], "questions": ["Is the address made up?"],
                              "flag_threshold": 1, "quorum": 2});
    let session = app.scan(config, companies(10)).await;
    let items = items(
        4,
        |i| json!({"email": format!("gold{i}@firm.test")}),
        json!({}),
    );
    add_gold(&app, &session, items).await;
    let agent = app.token("agent", "bot").await;
    for n in 0..4 {
        let next = app.next(&agent, &session, "bot").await;
        assert!(is_gold(&next), "{next}");
        let (quest, lease) = assigned(&next);
        let i: u32 = next["quest"]["key"].as_str().unwrap()[5..].parse().unwrap();
        let email = if n % 2 == 0 {
            format!("gold{i}@firm.test")
        } else {
            format!("wrong{i}@firm.test")
        };
        app.submit(
            &agent,
            &quest,
            &lease,
            json!({"email": email, "confidence": "high"}),
        )
        .await
        .expect(200);
        app.settled(&quest).await;
    }
    let listing = app
        .get(&format!("/v1/verifiers?session={session}"), &app.admin)
        .await
        .expect(200);
    let gold = listing["gold"].as_array().unwrap();
    let of = |name: &str| gold.iter().find(|v| v["verifier"] == name).unwrap().clone();
    let figures = |v: Value| {
        ["answered", "caught", "missed", "false_alarms", "cleared"].map(|f| v[f].as_u64().unwrap())
    };
    assert_eq!(figures(of("alpha")), [4, 2, 0, 0, 2], "{listing}");
    assert_eq!(figures(of("beta")), [4, 0, 2, 0, 2], "{listing}");
}
