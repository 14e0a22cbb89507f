//! Calibration of the AI verifiers against the review queue, end to end:
//! scripted fake verifiers (each flags the quests of a fixed set of keys), a
//! scripted reviewer (rejects a fixed set, approves the rest), and the figures
//! `GET /v1/verifiers` reports, computed here by hand.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use quest::domain::Decision;
use quest::domain::work::ReviewerId;
use serde_json::{Value, json};

use crate::fake_llm::{Behaviour, FakeLlm};
use crate::helpers::*;
use crate::verifiers::{QUESTION, submit_next, verifiers_toml};

/// A question text no other test uses, so that this test's gauges in the
/// process-wide `/metrics` recorder are its own.
fn question() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "[calibration {}-{}] {QUESTION}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn key(i: usize) -> String {
    format!("Company {i:04}")
}

/// A verifier that flags exactly the quests whose key is in `keys`.
fn flags(keys: impl IntoIterator<Item = usize>) -> Behaviour {
    let keys: Vec<String> = keys.into_iter().map(key).collect();
    Behaviour::Reply(Arc::new(move |prompt| {
        if keys.iter().any(|k| prompt.contains(&format!("\"{k}\""))) {
            "YES: a doubt".into()
        } else {
            "NO: fine".into()
        }
    }))
}

/// Fakes `alpha` and `beta` and an app that knows them.
async fn two(alpha: Behaviour, beta: Behaviour) -> (TestApp, [FakeLlm; 2]) {
    let fakes = [
        FakeLlm::start("judge-alpha", alpha).await,
        FakeLlm::start("judge-beta", beta).await,
    ];
    let toml = verifiers_toml(&[
        ("alpha", &fakes[0].base_url, 5_000, 4),
        ("beta", &fakes[1].base_url, 5_000, 4),
    ]);
    (spawn_app_with(&toml).await, fakes)
}

/// The contact session with `alpha` and `beta`, a minority veto, and `extra` verify settings.
fn session_config(question: &str, extra: Value) -> Value {
    let mut config = contact_config(3);
    config["verify"] = json!({
        "verifiers": ["alpha", "beta"],
        "questions": [question],
        "flag_threshold": 1,
        "quorum": 2
    });
    for (k, v) in extra.as_object().unwrap() {
        config["verify"][k] = v.clone();
    }
    config
}

/// The agent works the next quest; the quest once its verifiers are done.
async fn work_next(app: &TestApp, agent: &str, session: &str) -> Value {
    let (quest, _) = submit_next(
        app,
        agent,
        session,
        json!({"email": "info@acme.test", "confidence": "high"}),
    )
    .await;
    app.settled(&quest).await
}

/// The scripted reviewer decides one REVIEW quest: reject when `reject`.
async fn decide(app: &TestApp, reviewer: &str, quest: &Value, reject: bool) {
    assert_eq!(quest["state"], "REVIEW", "{quest}");
    let (decision, note) = if reject {
        ("reject", "wrong address")
    } else {
        ("approve", "checked")
    };
    app.post(
        &format!("/v1/review/{}", quest["id"].as_str().unwrap()),
        reviewer,
        json!({"decision": decision, "note": note}),
    )
    .await
    .expect(200);
}

/// Round one: quests 0..12 reviewed one by one in order; alpha flags 0..6,
/// beta flags 4..12, the reviewer rejects {0, 1, 2, 3, 6, 7}.
///
/// alpha: upheld {0,1,2,3} = 4, overruled {4,5} = 2, missed {6,7} = 2,
/// cleared {8..12} = 4. po = 8/12, pe = 6/12·6/12 + 6/12·6/12 = 1/2,
/// kappa = (2/3 - 1/2) / (1/2) = 1/3.
/// beta: upheld {6,7} = 2, overruled {4,5,8..12} = 6, missed {0..4} = 4,
/// cleared 0. po = 2/12, pe = 8/12·6/12 + 4/12·6/12 = 1/2,
/// kappa = (1/6 - 1/2) / (1/2) = -2/3.
const ALPHA_ROUND_ONE: std::ops::Range<usize> = 0..6;
const BETA_ROUND_ONE: std::ops::Range<usize> = 4..12;
const REJECTED_ROUND_ONE: [usize; 6] = [0, 1, 2, 3, 6, 7];

async fn round_one(app: &TestApp, agent: &str, reviewer: &str, session: &str) -> Vec<Value> {
    let mut quests = Vec::new();
    for _ in 0..12 {
        quests.push(work_next(app, agent, session).await);
    }
    for (i, quest) in quests.iter().enumerate() {
        assert_eq!(quest["key"], key(i));
        decide(app, reviewer, quest, REJECTED_ROUND_ONE.contains(&i)).await;
    }
    quests
}

fn verifiers(answer: &Value) -> Vec<&Value> {
    answer["calibration"].as_array().unwrap().iter().collect()
}

fn row<'a>(answer: &'a Value, verifier: &str) -> &'a Value {
    verifiers(answer)
        .into_iter()
        .find(|r| r["verifier"] == verifier)
        .unwrap_or_else(|| panic!("no row of {verifier}: {answer}"))
}

#[track_caller]
fn assert_table(row: &Value, upheld: u64, overruled: u64, missed: u64, cleared: u64, kappa: f64) {
    let got = [
        row["upheld"].as_u64(),
        row["overruled"].as_u64(),
        row["missed"].as_u64(),
        row["cleared"].as_u64(),
        row["labels"].as_u64(),
    ];
    let labels = upheld + overruled + missed + cleared;
    assert_eq!(
        got,
        [
            Some(upheld),
            Some(overruled),
            Some(missed),
            Some(cleared),
            Some(labels)
        ],
        "{row}"
    );
    let k = row["kappa"].as_f64().expect("a kappa");
    assert!(
        (k - kappa).abs() < 1e-9,
        "kappa {k}, expected {kappa}: {row}"
    );
    assert_eq!(row["kappa_reason"], Value::Null);
}

async fn calibration_of(app: &TestApp, session: Option<&str>) -> Value {
    let path = match session {
        Some(s) => format!("/v1/verifiers?session={s}"),
        None => "/v1/verifiers".into(),
    };
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!("watcher-{}", N.fetch_add(1, Ordering::SeqCst));
    let viewer = app.token("viewer", &name).await;
    app.get(&path, &viewer).await.expect(200)
}

#[tokio::test]
async fn the_review_queue_calibrates_each_verifier_with_its_confusion_counts_kappa_and_disagreements()
 {
    let question = question();
    // Quests 12 and 13: alpha flags them, they are decided in bulk (no labels).
    // Quest 14: nobody flags it; it passes without a person (no label).
    let (app, _fakes) = two(flags(ALPHA_ROUND_ONE.chain(12..14)), flags(BETA_ROUND_ONE)).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let session = app
        .scan(session_config(&question, json!({})), companies(15))
        .await;

    let before = calibration_of(&app, Some(&session)).await;
    assert!(verifiers(&before).is_empty(), "no answers yet: {before}");

    round_one(&app, &agent, &reviewer, &session).await;
    let bulk = [
        work_next(&app, &agent, &session).await,
        work_next(&app, &agent, &session).await,
    ];
    let passed = work_next(&app, &agent, &session).await;
    assert_eq!(passed["state"], "PASS");
    let token = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "bulk", "role": "reviewer"}),
        )
        .await
        .expect(201);
    let bo = ReviewerId::new(token["id"].as_str().unwrap().parse().unwrap(), "bo");
    for quest in &bulk {
        assert_eq!(quest["state"], "REVIEW");
        app.store
            .decide_review_in_bulk(
                quest["id"].as_str().unwrap().parse().unwrap(),
                &bo,
                Decision::Reject,
                "all wrong",
            )
            .await
            .expect("a bulk decision");
    }

    let answer = calibration_of(&app, Some(&session)).await;
    println!(
        "GET /v1/verifiers?session={session}\n{}",
        serde_json::to_string_pretty(&answer).unwrap()
    );
    assert_eq!(answer["session_id"], session.as_str());
    assert_eq!(
        (answer["floor"].clone(), answer["audit_rate"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(verifiers(&answer).len(), 2, "{answer}");
    let alpha = row(&answer, "alpha");
    assert_table(alpha, 4, 2, 2, 4, 1.0 / 3.0);
    assert_eq!(
        (
            alpha["question_index"].as_u64(),
            alpha["question"].as_str(),
            alpha["flagged_share"].as_f64(),
            alpha["standing"].as_str(),
        ),
        (Some(0), Some(question.as_str()), Some(0.5), Some("voting"))
    );
    assert_eq!(alpha["not_judged"], Value::Null, "no floor, no judgement");
    let beta = row(&answer, "beta");
    assert_table(beta, 2, 6, 4, 0, -2.0 / 3.0);
    assert_eq!(
        beta["standing"], "voting",
        "without a floor every verifier votes"
    );
    assert!(answer["switches"].as_array().unwrap().is_empty());

    // Every answer both gave is compared: quests 0..15, alike on {4, 5} (both
    // flagged) and 14 (neither did).
    assert_eq!(
        answer["agreement"],
        json!([{"verifiers": ["alpha", "beta"], "compared": 15, "agreed": 3, "rate": 0.2}])
    );

    // The disagreements: alpha's flags on 4 and 5 overruled, its silence on 6
    // and 7 rejected; beta's flags on 4, 5, 8..12 overruled, its silence on 0..4.
    let disagreements = answer["disagreements"].as_array().unwrap();
    let of = |verifier: &str| -> BTreeSet<(String, bool, String)> {
        disagreements
            .iter()
            .filter(|d| d["verifier"] == verifier)
            .map(|d| {
                (
                    d["key"].as_str().unwrap().to_owned(),
                    d["flagged"].as_bool().unwrap(),
                    d["decision"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let expect = |items: &[(usize, bool)]| -> BTreeSet<(String, bool, String)> {
        items
            .iter()
            .map(|&(i, flagged)| {
                let decision = if flagged { "approve" } else { "reject" };
                (key(i), flagged, decision.to_owned())
            })
            .collect()
    };
    assert_eq!(
        of("alpha"),
        expect(&[(4, true), (5, true), (6, false), (7, false)])
    );
    let beta_expected: Vec<(usize, bool)> = [4, 5, 8, 9, 10, 11]
        .into_iter()
        .map(|i| (i, true))
        .chain((0..4).map(|i| (i, false)))
        .collect();
    assert_eq!(of("beta"), expect(&beta_expected));
    assert_eq!(disagreements.len(), 14, "bulk decisions are no labels");
    let first = &disagreements[0];
    assert_eq!(
        (first["reviewer"].as_str(), first["session_id"].as_str()),
        (Some("ana"), Some(session.as_str()))
    );

    // The session's status carries the same rows; the server-wide answer
    // groups by question text and has no standing.
    let status = app.status(&session).await;
    assert_eq!(status["calibration"], answer["calibration"]);
    let server = calibration_of(&app, None).await;
    assert_eq!(server["session_id"], Value::Null);
    let alpha = row(&server, "alpha");
    assert_table(alpha, 4, 2, 2, 4, 1.0 / 3.0);
    assert_eq!(
        (alpha["question_index"].clone(), alpha["standing"].clone()),
        (Value::Null, Value::Null)
    );
    assert!(!server["disagreements"].as_array().unwrap().is_empty());
    // An agent sees the figures but no other quest's disagreement.
    let agent = app.token("agent", "curious").await;
    let seen = app.get("/v1/verifiers", &agent).await.expect(200);
    assert_eq!(seen["calibration"], server["calibration"]);
    assert_eq!(seen["disagreements"], json!([]), "{seen}");

    let (code, metrics) = app.bytes("/metrics").await;
    assert_eq!(code, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    let gauge = |name: &str, verifier: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{"))
                    && l.contains(&format!("verifier=\"{verifier}\""))
                    && l.contains(&question[..question.find(']').unwrap() + 1])
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} of {verifier} in /metrics"))
    };
    assert_eq!(gauge("quest_l2_calibration_labels", "alpha"), 12.0);
    assert_eq!(gauge("quest_l2_calibration_overruled", "beta"), 6.0);
    assert!((gauge("quest_l2_calibration_kappa", "beta") + 2.0 / 3.0).abs() < 1e-9);
}

#[tokio::test]
async fn without_the_settings_a_badly_calibrated_verifier_keeps_its_veto() {
    let question = question();
    // Quest 12: only beta, the badly calibrated one, flags it.
    let (app, _fakes) = two(flags(ALPHA_ROUND_ONE), flags(BETA_ROUND_ONE.chain(12..13))).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let session = app
        .scan(session_config(&question, json!({})), companies(13))
        .await;
    let stored = app
        .get(&format!("/v1/sessions/{session}"), &app.admin)
        .await
        .expect(200);
    let verify = stored["config"]["verify"].as_object().unwrap();
    for absent in ["min_kappa", "min_labels", "audit_rate"] {
        assert!(
            !verify.contains_key(absent),
            "{absent} stays unset: {verify:?}"
        );
    }
    round_one(&app, &agent, &reviewer, &session).await;
    let probe = work_next(&app, &agent, &session).await;
    assert_eq!(probe["state"], "REVIEW", "the minority veto: {probe}");
    let answer = calibration_of(&app, Some(&session)).await;
    assert_table(row(&answer, "beta"), 2, 6, 4, 0, -2.0 / 3.0);
    assert!(answer["switches"].as_array().unwrap().is_empty());
    assert_eq!(row(&answer, "beta")["standing"], "voting");
}

/// The L2 fact of `verifier` on a quest.
fn l2_fact<'a>(quest: &'a Value, verifier: &str) -> &'a Value {
    quest["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == format!("l2:{verifier}"))
        .unwrap_or_else(|| panic!("no fact of {verifier}: {quest}"))
}

#[tokio::test]
async fn a_verifier_below_the_floor_turns_advisory_and_wins_its_veto_back_above_it() {
    let question = question();
    // 12: a probe only beta flags. 13..18: both flag, the reviewer rejects
    // (beta's flags upheld); 18..24: only alpha flags, the reviewer approves
    // (beta's silence right). 24: a probe only beta flags.
    let (app, _fakes) = two(
        flags(ALPHA_ROUND_ONE.chain(13..24)),
        flags(BETA_ROUND_ONE.chain([12]).chain(13..18).chain([24])),
    )
    .await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let settings = json!({"min_kappa": 0.1, "min_labels": 12});
    let session = app
        .scan(session_config(&question, settings), companies(25))
        .await;

    // Round one judges both at the twelfth label: alpha at 1/3 keeps its
    // veto, beta at -2/3 loses it, with the figures recorded.
    round_one(&app, &agent, &reviewer, &session).await;
    let answer = calibration_of(&app, Some(&session)).await;
    assert_eq!(answer["floor"], json!({"min_kappa": 0.1, "min_labels": 12}));
    assert_eq!(row(&answer, "alpha")["standing"], "voting");
    assert_eq!(row(&answer, "beta")["standing"], "advisory");
    assert_eq!(row(&answer, "beta")["not_judged"], Value::Null);
    let switches = answer["switches"].as_array().unwrap();
    assert_eq!(switches.len(), 1, "{answer}");
    let s = &switches[0];
    assert_eq!(
        (
            s["verifier"].as_str(),
            s["question_index"].as_u64(),
            s["standing"].as_str(),
            s["labels"].as_u64(),
            [
                s["upheld"].as_u64(),
                s["overruled"].as_u64(),
                s["missed"].as_u64(),
                s["cleared"].as_u64()
            ],
            s["min_kappa"].as_f64(),
            s["min_labels"].as_u64(),
        ),
        (
            Some("beta"),
            Some(0),
            Some("advisory"),
            Some(12),
            [Some(2), Some(6), Some(4), Some(0)],
            Some(0.1),
            Some(12)
        )
    );
    assert!((s["kappa"].as_f64().unwrap() + 2.0 / 3.0).abs() < 1e-9);
    assert!((s["flagged_share"].as_f64().unwrap() - 8.0 / 12.0).abs() < 1e-9);

    // Advisory: beta is still asked and shown, but its flag alone passes the quest.
    let probe = work_next(&app, &agent, &session).await;
    assert_eq!(probe["state"], "PASS", "{probe}");
    let beta = l2_fact(&probe, "beta");
    assert_eq!(beta["actual"], "YES: a doubt");
    assert!(
        beta["hint"].as_str().unwrap().contains("advisory"),
        "{beta}"
    );
    assert_eq!(
        probe["l2_answers"].as_array().unwrap().len(),
        2,
        "an advisory verifier is still asked, and counts towards the quorum of 2"
    );

    // Round two: alpha's flags bring quests to people, and beta's answers on
    // them are labels. After the eleventh, beta's table is
    // (7 upheld, 6 overruled, 4 missed, 6 cleared), n = 23:
    // po = 13/23, pe = (13·11 + 10·12) / 23² = 263/529,
    // kappa = (13·23 - 263) / (529 - 263) = 36/266 = 18/133 ≈ 0.135 ≥ 0.1.
    // Before it, kappa stays below the floor (2/22 ≈ 0.091 after the tenth).
    let mut round_two = Vec::new();
    for _ in 13..24 {
        round_two.push(work_next(&app, &agent, &session).await);
    }
    for (n, quest) in round_two.iter().enumerate() {
        let i = 13 + n;
        assert_eq!(quest["key"], key(i));
        decide(&app, &reviewer, quest, i < 18).await;
        let standing = calibration_of(&app, Some(&session)).await;
        let expected = if i < 23 { "advisory" } else { "voting" };
        assert_eq!(
            row(&standing, "beta")["standing"],
            expected,
            "after quest {i}"
        );
        assert_eq!(
            row(&standing, "alpha")["standing"],
            "voting",
            "after quest {i}"
        );
    }
    let answer = calibration_of(&app, Some(&session)).await;
    println!(
        "GET /v1/verifiers?session={session}\n{}",
        serde_json::to_string_pretty(&answer).unwrap()
    );
    assert_table(row(&answer, "beta"), 7, 6, 4, 6, 18.0 / 133.0);
    let switches = answer["switches"].as_array().unwrap();
    assert_eq!(switches.len(), 2, "{answer}");
    let back = &switches[1];
    assert_eq!(
        (
            back["verifier"].as_str(),
            back["standing"].as_str(),
            back["labels"].as_u64()
        ),
        (Some("beta"), Some("voting"), Some(23))
    );
    assert!((back["kappa"].as_f64().unwrap() - 18.0 / 133.0).abs() < 1e-9);

    // Its veto is back: its flag alone sends the quest to a person again.
    let probe = work_next(&app, &agent, &session).await;
    assert_eq!(probe["state"], "REVIEW", "{probe}");
    assert_eq!(
        l2_fact(&probe, "beta")["hint"],
        "this AI verifier doubts the result; a person decides"
    );
}

#[tokio::test]
async fn a_verifier_whose_labels_hold_only_one_of_its_answers_is_not_judged() {
    let question = question();
    // alpha flags every quest, beta none: each is labelled on one answer only.
    let (app, _fakes) = two(flags(0..13), flags([])).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;
    let settings = json!({"min_kappa": 0.5, "min_labels": 12});
    let session = app
        .scan(session_config(&question, settings), companies(13))
        .await;
    for i in 0..12 {
        let quest = work_next(&app, &agent, &session).await;
        decide(&app, &reviewer, &quest, i % 3 == 0).await;
    }
    let answer = calibration_of(&app, Some(&session)).await;
    // alpha: 4 upheld, 8 overruled; po = 4/12, pe = 1 · 4/12 = 1/3: kappa 0,
    // below the floor, but all of its labels are flags.
    let alpha = row(&answer, "alpha");
    assert_table(alpha, 4, 8, 0, 0, 0.0);
    assert_eq!(alpha["standing"], "voting");
    assert!(
        alpha["not_judged"]
            .as_str()
            .unwrap()
            .contains("12 are quests it flagged and 0 quests it did not"),
        "{alpha}"
    );
    let beta = row(&answer, "beta");
    assert_table(beta, 0, 0, 4, 8, 0.0);
    assert_eq!(beta["standing"], "voting");
    assert!(answer["switches"].as_array().unwrap().is_empty());
    let probe = work_next(&app, &agent, &session).await;
    assert_eq!(probe["state"], "REVIEW", "alpha keeps its veto: {probe}");
}

/// The `audit` fact of a quest, if any.
fn audit_fact(quest: &Value) -> Option<&Value> {
    quest["last_facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "audit")
}

#[tokio::test]
async fn an_audit_sample_sends_quests_the_verifiers_pass_to_review_marked_as_audit_and_labels_them()
{
    let question = question();
    // alpha flags quest 2 of each session; nobody flags the others.
    let (app, _fakes) = two(flags([2]), flags([])).await;
    let agent = app.token("agent", "bot").await;
    let reviewer = app.token("reviewer", "ana").await;

    // audit_rate 1: every quest the verifiers pass goes to a person, marked.
    let all = app
        .scan(
            session_config(&question, json!({"audit_rate": 1.0})),
            companies(3),
        )
        .await;
    let mut flagged = Value::Null;
    for i in 0..3 {
        let quest = work_next(&app, &agent, &all).await;
        assert_eq!(quest["state"], "REVIEW", "{quest}");
        if i == 2 {
            assert!(
                audit_fact(&quest).is_none(),
                "a flagged quest is no audit sample: {quest}"
            );
            flagged = quest;
            continue;
        }
        let fact = audit_fact(&quest).unwrap_or_else(|| panic!("an audit fact: {quest}"));
        assert_eq!(fact["actual"], "drawn for the audit sample (audit.rate 1)");
    }
    let listed = app
        .get(&format!("/v1/review?session={all}&check=audit"), &reviewer)
        .await
        .expect(200);
    let listed = listed.as_array().unwrap();
    assert_eq!(
        listed.len(),
        2,
        "the review queue filters audits by their check"
    );
    for quest in listed {
        decide(&app, &reviewer, quest, false).await;
    }
    // The audited quests are labels of both verifiers' clear answers.
    let answer = calibration_of(&app, Some(&all)).await;
    assert_eq!(answer["audit_rate"], 1.0);
    for verifier in ["alpha", "beta"] {
        let r = row(&answer, verifier);
        assert_eq!(
            (r["labels"].as_u64(), r["cleared"].as_u64()),
            (Some(2), Some(2)),
            "{r}"
        );
    }
    // They are the error bound's labels too, in the verifiers' stratum; the
    // flagged quest, decided by a person, is none.
    decide(&app, &reviewer, &flagged, true).await;
    let quality = app
        .get(&format!("/v1/sessions/{all}/quality"), &app.admin)
        .await
        .expect(200);
    assert_eq!(
        quality["strata"],
        json!([{"stratum": "gate+verifiers", "audited": 2, "errors": 0, "error_bound": quality["error_bound"]}]),
        "{quality}"
    );
    assert_eq!(quality["pending_audits"], 0, "{quality}");

    // audit_rate 0.5: each quest's fate is a keyed draw (the key is the
    // server's; see domain::quality for its unpredictability), and over 23
    // unflagged quests both fates occur (all alike: 2 chances in 2^23).
    let half = app
        .scan(
            session_config(&question, json!({"audit_rate": 0.5})),
            companies(24),
        )
        .await;
    let (mut audited, mut passed) = (0, 0);
    for i in 0..24 {
        let quest = work_next(&app, &agent, &half).await;
        if i == 2 {
            assert_eq!(quest["state"], "REVIEW", "flagged: {quest}");
            assert!(audit_fact(&quest).is_none(), "{quest}");
            continue;
        }
        match audit_fact(&quest) {
            Some(fact) => {
                audited += 1;
                assert_eq!(quest["state"], "REVIEW", "{quest}");
                assert_eq!(
                    fact["actual"],
                    "drawn for the audit sample (audit.rate 0.5)"
                );
            }
            None => {
                passed += 1;
                assert_eq!(quest["state"], "PASS", "{quest}");
            }
        }
    }
    assert!(
        audited > 0 && passed > 0,
        "both fates: {audited} audited, {passed} passed without a person"
    );
    let status = app.status(&half).await;
    assert_eq!(status["review"], audited + 1, "{status}");
    assert_eq!(status["pass"], passed, "{status}");
}

#[tokio::test]
async fn calibration_settings_are_checked_with_messages_that_say_what_to_do() {
    let app = spawn_app().await;
    let question = question();
    let cases = [
        (json!({"min_labels": 30}), "set min_kappa too"),
        (json!({"min_kappa": 1.5}), "from -1 to 1"),
        (json!({"min_kappa": 0.4, "min_labels": 5}), "give 10 to"),
        (json!({"audit_rate": -0.1}), "from 0 to 1"),
    ];
    for (extra, needle) in cases {
        let mut config = session_config(&question, extra.clone());
        config["verify"]["verifiers"] = json!(["alpha"]);
        config["verify"]["quorum"] = json!(1);
        let answer = app
            .post(
                "/v1/sessions",
                &app.admin,
                json!({"config": config, "items": companies(1)}),
            )
            .await;
        answer.refused(422, "invalid_config");
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{extra}: {message}");
    }
}

#[tokio::test]
async fn the_verifiers_of_an_unknown_session_are_404() {
    let app = spawn_app().await;
    app.get(
        "/v1/verifiers?session=0190a0a0-0000-7000-8000-000000000000",
        &app.admin,
    )
    .await
    .refused(404, "not_found");
}
