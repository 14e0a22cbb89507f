//! What the answers to gold say (issue 22, points 2 and 3): each token's
//! score with its lower bound, each AI verifier's on the answers to gold,
//! and the floor under which a token is paused and its gate PASSes marked
//! suspect.

use serde_json::{Value, json};

use crate::gold::{add_gold, gold_session, is_gold, items, work_one};
use crate::helpers::{TestApp, assigned, companies, contact_config, spawn_app};

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

/// A session worked until its sloppy token was paused.
struct Worked {
    session: String,
    sloppy: String,
    careful: String,
    /// The sloppy token's real quests, each with how many gold quests it
    /// had answered before it.
    real: Vec<(String, u32)>,
    /// Its gold answers.
    golds: u32,
    /// How many gold answers it had given when its pause was first listed
    /// (the floor is judged as each gold answer is decided).
    paused_at: Option<u32>,
    /// `next`'s refusal.
    paused: crate::helpers::Answer,
}

/// A session of 150 real quests under a floor of 0.5 on 8 gold answers,
/// with `extra` gold settings, worked by a sloppy token whose gold answers
/// are all wrong (its real results pass the gate) and a careful one, until
/// the sloppy one is paused.
async fn worked_until_paused(app: &TestApp, extra: Value) -> Worked {
    // 8 right of 8 is at least 74.6% (one-sided 95%), 0 of 8 at least 0%.
    // At rate 0.3 the chance that no real quest falls between the first and
    // the eighth gold one is 0.3^7, about 2 in 10,000.
    let mut floor = json!({"rate": 0.3, "warmup": 0, "min_accuracy": 0.5, "min_answers": 8});
    for (k, v) in extra.as_object().unwrap() {
        floor[k] = v.clone();
    }
    let session = gold_session(app, 150, floor, 40).await;
    let sloppy = app.token("agent", "sloppy").await;
    let careful = app.token("agent", "careful").await;
    let (mut real, mut golds, mut paused) = (Vec::new(), 0, None);
    let mut paused_at = None;
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
            let pauses = app
                .get(&format!("/v1/sessions/{session}/pauses"), &app.admin)
                .await
                .expect(200);
            if paused_at.is_none() && !pauses.as_array().unwrap().is_empty() {
                paused_at = Some(golds);
            }
        } else {
            real.push((quest, golds));
        }
        assert!(work_one(app, &careful, &session, "bot").await.is_some());
        // Time passes between decisions, as it does.
        app.clock.advance(std::time::Duration::from_secs(1));
    }
    Worked {
        session,
        sloppy,
        careful,
        real,
        golds,
        paused_at,
        paused: paused.expect("the sloppy token is paused"),
    }
}

#[tokio::test]
async fn a_token_under_the_gold_floor_is_paused_with_its_gate_passes_marked_suspect_until_resumed()
{
    let app = spawn_app().await;
    let Worked {
        session,
        sloppy,
        careful,
        real,
        golds,
        paused_at,
        paused,
    } = worked_until_paused(&app, json!({})).await;
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
    assert_eq!(
        paused_at,
        Some(8),
        "paused as its eighth gold answer was decided"
    );
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
async fn with_audit_suspects_each_suspect_gets_a_label_only_audit_that_never_changes_its_state() {
    let app = spawn_app().await;
    let worked = worked_until_paused(&app, json!({"audit_suspects": true})).await;
    let session = &worked.session;
    let suspects: Vec<&String> = (worked.real.iter())
        .filter(|(_, golds_before)| *golds_before > 0)
        .map(|(quest, _)| quest)
        .collect();
    assert!(suspects.len() >= 2, "too few suspects: {:?}", worked.real);
    // Each suspect is listed for a label-only audit, and nothing else is.
    let reviewer = app.token("reviewer", "auditor").await;
    let listed = app
        .get(
            &format!("/v1/review?session={session}&check=audit_pass"),
            &reviewer,
        )
        .await
        .expect(200);
    let mut ids: Vec<&str> = (listed.as_array().unwrap().iter())
        .map(|q| q["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut wanted: Vec<&str> = suspects.iter().map(|q| q.as_str()).collect();
    wanted.sort();
    assert_eq!(ids, wanted, "{listed}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["state"] == "PASS")
    );
    let mut events = crate::helpers::open_events(&app, session).await;
    // One is found wrong, one right: both stay PASS.
    let (wrong, right) = (suspects[0], suspects[1]);
    for (quest, decision) in [(wrong, "reject"), (right, "approve")] {
        let answer = app
            .post(
                &format!("/v1/audits/{quest}"),
                &reviewer,
                json!({"decision": decision, "note": "checked by hand"}),
            )
            .await;
        assert_eq!(answer.status, 204, "{}", answer.body);
    }
    let seen = crate::helpers::read_until(&mut events, "event: audit_rejected").await;
    assert!(seen.contains(wrong.as_str()), "{seen}");
    let view = app.quest(wrong).await;
    assert_eq!(
        (
            view["state"].clone(),
            view["suspect"].clone(),
            view["audit_rejected"].clone()
        ),
        (json!("PASS"), json!(true), json!(true)),
        "{view}"
    );
    let view = app.quest(right).await;
    assert_eq!(
        (view["state"].clone(), view["audit_rejected"].clone()),
        (json!("PASS"), json!(false)),
        "{view}"
    );
    let status = app.status(session).await;
    assert_eq!(status["audit_rejected"], 1, "{status}");
    // The labels are no sample of the bound: nothing is audited at random,
    // and every suspect but the approved one is a known error.
    let quality = app
        .get(&format!("/v1/sessions/{session}/quality"), &app.admin)
        .await
        .expect(200);
    assert_eq!(quality["measured"], false, "{quality}");
    assert_eq!(quality["known_errors"], suspects.len() - 1, "{quality}");
    let listed = app
        .get(
            &format!("/v1/review?session={session}&check=audit_pass"),
            &reviewer,
        )
        .await
        .expect(200);
    assert_eq!(listed.as_array().unwrap().len(), suspects.len() - 2);
    // A label is final.
    app.post(
        &format!("/v1/audits/{wrong}"),
        &reviewer,
        json!({"decision": "approve", "note": ""}),
    )
    .await
    .refused(409, "audit_labelled");
}

/// Two verifiers, alpha flagging the results that are wrong and beta none,
/// asked about four answers to gold, two of them wrong; the session's
/// listing of its verifiers.
async fn verifiers_asked_about_gold(gold_labels: bool) -> Value {
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
                              "flag_threshold": 1, "quorum": 2, "gold_labels": gold_labels});
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
    app.get(&format!("/v1/verifiers?session={session}"), &app.admin)
        .await
        .expect(200)
}

/// The confusion counts of a verifier's calibration row in a listing (none: zeros).
fn labels_of(listing: &Value, verifier: &str) -> [u64; 4] {
    let rows = listing["calibration"].as_array().unwrap();
    rows.iter()
        .find(|r| r["verifier"] == verifier)
        .map_or([0; 4], |r| {
            ["upheld", "overruled", "missed", "cleared"].map(|f| r[f].as_u64().unwrap())
        })
}

#[tokio::test]
async fn each_ai_verifier_is_scored_on_the_answers_to_gold_apart_from_its_calibration() {
    let listing = verifiers_asked_about_gold(false).await;
    let gold = listing["gold"].as_array().unwrap();
    let of = |name: &str| gold.iter().find(|v| v["verifier"] == name).unwrap().clone();
    let figures = |v: Value| {
        ["answered", "caught", "missed", "false_alarms", "cleared"].map(|f| v[f].as_u64().unwrap())
    };
    assert_eq!(figures(of("alpha")), [4, 2, 0, 0, 2], "{listing}");
    assert_eq!(figures(of("beta")), [4, 0, 2, 0, 2], "{listing}");
    // Apart: no person labelled any answer, so the calibration has none.
    assert_eq!(labels_of(&listing, "alpha"), [0; 4], "{listing}");
}

#[tokio::test]
async fn with_gold_labels_the_answers_about_gold_count_in_the_calibration() {
    let listing = verifiers_asked_about_gold(true).await;
    // upheld, overruled, missed, cleared: the comparison is the label.
    assert_eq!(labels_of(&listing, "alpha"), [2, 0, 0, 2], "{listing}");
    assert_eq!(labels_of(&listing, "beta"), [0, 0, 2, 2], "{listing}");
    let alpha = (listing["calibration"].as_array().unwrap().iter())
        .find(|r| r["verifier"] == "alpha")
        .unwrap();
    assert_eq!(alpha["labels"], 4, "{listing}");
}

#[tokio::test]
async fn gold_sent_to_review_looks_like_a_real_audit_and_scores_each_reviewer() {
    let app = spawn_app().await;
    let mut config = contact_config(3);
    config["audit"] = json!({"rate": 0.05});
    config["gold"] = json!({"rate": 1.0, "warmup": 0, "review_rate": 1.0});
    let session = app.scan(config, companies(10)).await;
    let expected = |i| json!({"email": format!("gold{i}@firm.test")});
    add_gold(
        &app,
        &session,
        items(6, expected, json!({"email": "casefold"})),
    )
    .await;
    // The agent answers items 0, 2, 4 right and 1, 3, 5 wrong; every answer
    // passes the gate, and every gold quest goes to review.
    let agent = app.token("agent", "mixed").await;
    let mut right = std::collections::HashMap::new();
    for _ in 0..6 {
        let next = app.next(&agent, &session, "bot").await;
        assert!(is_gold(&next), "{next}");
        let (quest, lease) = assigned(&next);
        let i: u32 = next["quest"]["key"].as_str().unwrap()[5..].parse().unwrap();
        let email = match i % 2 {
            0 => format!("gold{i}@firm.test"),
            _ => "someone@firm.test".to_owned(),
        };
        let answer = app
            .submit(
                &agent,
                &quest,
                &lease,
                json!({"email": email, "confidence": "high"}),
            )
            .await
            .expect(200);
        assert_eq!(answer["state"], "REVIEW", "{answer}");
        right.insert(quest, i.is_multiple_of(2));
    }
    // In the session's queue, named as the session's own and drawn as a
    // real audit is.
    let alice = app.token("reviewer", "alice").await;
    let bob = app.token("reviewer", "bob").await;
    let queue = app
        .get(&format!("/v1/review?session={session}"), &alice)
        .await
        .expect(200);
    let queue = queue.as_array().unwrap();
    assert_eq!(queue.len(), 6, "{queue:?}");
    for q in queue {
        assert_eq!(q["session_id"], session.as_str(), "{q}");
        let facts = q["last_facts"].as_array().unwrap();
        assert!(
            facts
                .iter()
                .any(|f| f["actual"] == "drawn for the audit sample (audit.rate 0.05)"),
            "{q}"
        );
    }
    // Alice decides three as she should; Bob three the wrong way round.
    for (n, q) in queue.iter().enumerate() {
        let quest = q["id"].as_str().unwrap();
        let is_right = right[quest];
        let (reviewer, approve) = match n % 2 {
            0 => (&alice, is_right),
            _ => (&bob, !is_right),
        };
        let decision = if approve { "approve" } else { "reject" };
        app.post(
            &format!("/v1/review/{quest}"),
            reviewer,
            json!({"decision": decision, "note": "checked"}),
        )
        .await
        .expect(200);
    }
    let figures = app
        .get(&format!("/v1/sessions/{session}/reviewers"), &app.admin)
        .await
        .expect(200);
    let gold = figures["gold"].as_array().unwrap();
    let of = |name: &str| gold.iter().find(|g| g["reviewer"] == name).unwrap().clone();
    assert_eq!(
        (
            of("alice")["decided"].clone(),
            of("alice")["correct"].clone()
        ),
        (json!(3), json!(3)),
        "{figures}"
    );
    assert_eq!(
        (of("bob")["decided"].clone(), of("bob")["correct"].clone()),
        (json!(3), json!(0)),
        "{figures}"
    );
    assert!(of("alice")["accuracy_lower_bound"].as_f64().unwrap() > 0.3);
    assert!(of("bob")["accuracy_lower_bound"].as_f64().unwrap() < 0.01);
    // Gold never counts in the session, reviewed or not.
    let status = app.status(&session).await;
    assert_eq!(
        (status["total"].clone(), status["pass"].clone()),
        (json!(10), json!(0))
    );
}
