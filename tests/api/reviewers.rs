//! Several reviewers where one is not enough (issue 21, point 6): with
//! `review.reviewers = 2` a quest in REVIEW needs two first looks from two
//! tokens; two may look at once; a reviewer never sees the other's look
//! before the quest is decided; agreement decides it, disagreement leaves it
//! to an adjudicator (an admin, or a reviewer token made with `adjudicate`)
//! who gave it no look. The database keeps the rule too: raw SQL cannot move
//! a quest out of REVIEW on one look of two.

use serde_json::{Value, json};

use crate::console::{reviewer_token as reviewer, two_reviewer_quests};
use crate::helpers::{TestApp, spawn_app};
use crate::ratchet::{ratchet_apps, raw, refused_by_a_rule};

async fn decide(
    app: &TestApp,
    token: &str,
    quest: &str,
    decision: &str,
    note: &str,
) -> crate::helpers::Answer {
    let body = json!({"decision": decision, "note": note});
    app.post(&format!("/v1/review/{quest}"), token, body).await
}

fn decisions(quest: &Value) -> Vec<(String, String, String, bool)> {
    quest["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["reviewer"].as_str().unwrap().to_owned(),
                r["decision"].as_str().unwrap().to_owned(),
                r["look"].as_str().unwrap().to_owned(),
                r["decides"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn d(reviewer: &str, decision: &str, look: &str, decides: bool) -> (String, String, String, bool) {
    (reviewer.into(), decision.into(), look.into(), decides)
}

#[tokio::test]
async fn two_agreeing_reviewers_decide_and_neither_sees_the_others_look_before() {
    let app = spawn_app().await;
    let quest = two_reviewer_quests(&app, 1).await.remove(0);
    let (ana, ben, cy) = (
        reviewer(&app, "ana", false).await,
        reviewer(&app, "ben", false).await,
        reviewer(&app, "cy", false).await,
    );
    assert_eq!(app.quest(&quest).await["reviews_required"], 2);

    // Two may hold claims at once; a third waits.
    let claim = |token: String| {
        let app = &app;
        let quest = quest.clone();
        async move {
            app.post(&format!("/v1/review/{quest}/claim"), &token, json!({}))
                .await
        }
    };
    assert_eq!(claim(ana.clone()).await.expect(200)["claimed_by"], "ana");
    assert_eq!(claim(ben.clone()).await.expect(200)["claimed_by"], "ben");
    let third = claim(cy.clone()).await;
    third.refused(409, "review_claimed");
    assert!(
        third.body.to_string().contains("ana and ben"),
        "{}",
        third.body
    );

    // ana's look leaves the quest in REVIEW, hidden from ben; ana looks once.
    let first = decide(&app, &ana, &quest, "approve", "looks right")
        .await
        .expect(200);
    assert_eq!(first["state"], "REVIEW");
    decide(&app, &ana, &quest, "approve", "")
        .await
        .refused(409, "already_reviewed");
    let seen_by_ben = app
        .get(&format!("/v1/quests/{quest}"), &ben)
        .await
        .expect(200);
    assert_eq!(decisions(&seen_by_ben), [], "ben judges alone");
    let listed = app.get("/v1/review", &ben).await.expect(200);
    assert_eq!(listed[0]["reviews"], json!([]), "the queue hides it too");
    let listed = app.get("/v1/review", &ana).await.expect(200);
    assert_eq!(listed, json!([]), "ana has nothing left to do on it");
    let seen_by_admin = app.quest(&quest).await;
    assert_eq!(
        decisions(&seen_by_admin),
        [d("ana", "approve", "first", false)],
        "an admin sees every look"
    );

    let decided = decide(&app, &ben, &quest, "approve", "").await.expect(200);
    assert_eq!(
        (decided["state"].as_str(), decided["decided_by"].as_str()),
        (Some("PASS"), Some("reviewers:ana,ben"))
    );
    let seen_by_cy = app
        .get(&format!("/v1/quests/{quest}"), &cy)
        .await
        .expect(200);
    assert_eq!(
        decisions(&seen_by_cy),
        [
            d("ana", "approve", "first", false),
            d("ben", "approve", "first", true)
        ],
        "every decision once decided"
    );
}

#[tokio::test]
async fn reviewers_who_disagree_leave_the_quest_to_an_adjudicator_who_gave_no_look() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 2).await;
    let (ana, ben, cy, dee) = (
        reviewer(&app, "ana", false).await,
        reviewer(&app, "ben", false).await,
        reviewer(&app, "cy", false).await,
        reviewer(&app, "dee", true).await,
    );
    let quest = &quests[0];
    decide(&app, &ana, quest, "approve", "the address is on the page")
        .await
        .expect(200);
    let split = decide(&app, &ben, quest, "reject", "another company's address")
        .await
        .expect(200);
    assert_eq!(split["state"], "REVIEW", "a disagreement decides nothing");
    assert_eq!(
        decisions(&split),
        [d("ben", "reject", "first", false)],
        "the answer shows ben his own look, not ana's"
    );

    // Only an adjudicator who gave no look sees it, with every note, and decides.
    let queue_ids = |list: Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        !queue_ids(app.get("/v1/review", &cy).await.expect(200)).contains(quest),
        "not for a plain reviewer"
    );
    assert!(!queue_ids(app.get("/v1/review", &ana).await.expect(200)).contains(quest));
    let for_dee = app.get("/v1/review", &dee).await.expect(200);
    let listed = for_dee
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == quest.as_str())
        .expect("dee adjudicates it");
    assert_eq!(
        decisions(listed),
        [
            d("ana", "approve", "first", false),
            d("ben", "reject", "first", false)
        ],
        "the adjudicator sees both looks"
    );
    decide(&app, &cy, quest, "approve", "")
        .await
        .refused(409, "adjudication_needed");
    let own = decide(&app, &ana, quest, "approve", "").await;
    own.refused(409, "adjudication_needed");
    assert!(
        own.body.to_string().contains("you are one of them"),
        "{}",
        own.body
    );
    let decided = decide(&app, &dee, quest, "reject", "ben is right")
        .await
        .expect(200);
    assert_eq!(
        (decided["state"].as_str(), decided["decided_by"].as_str()),
        (Some("DONE"), Some("adjudicator:dee"))
    );
    assert_eq!(
        decisions(&decided),
        [
            d("ana", "approve", "first", false),
            d("ben", "reject", "first", false),
            d("dee", "reject", "adjudication", true)
        ]
    );

    // An admin token adjudicates too.
    decide(&app, &ana, &quests[1], "reject", "wrong")
        .await
        .expect(200);
    decide(&app, &ben, &quests[1], "approve", "")
        .await
        .expect(200);
    let by_admin = decide(&app, &app.admin, &quests[1], "approve", "")
        .await
        .expect(200);
    assert_eq!(by_admin["decided_by"], "adjudicator:admin");
}

#[tokio::test]
async fn only_a_reviewer_token_is_made_to_adjudicate() {
    let app = spawn_app().await;
    for role in ["agent", "viewer", "admin"] {
        let body = json!({"name": format!("x-{role}"), "role": role, "adjudicate": true});
        app.post("/v1/tokens", &app.admin, body)
            .await
            .refused(422, "invalid_adjudicate");
    }
    reviewer(&app, "judge", true).await;
    let tokens = app.get("/v1/tokens", &app.admin).await.expect(200);
    let judge = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "judge")
        .unwrap();
    assert_eq!(judge["adjudicate"], true);

    // The same through the CLI: `quest token create --adjudicate`.
    let admin = crate::cli::Shell::new(&app, &app.admin, None, "ops");
    let made = admin
        .run(&[
            "token",
            "create",
            "--role",
            "reviewer",
            "--name",
            "cli-judge",
            "--adjudicate",
        ])
        .await;
    assert_eq!(made.code, 0, "{}", made.stderr);
    let refused = admin
        .run(&[
            "token",
            "create",
            "--role",
            "agent",
            "--name",
            "cli-x",
            "--adjudicate",
        ])
        .await;
    assert_ne!(refused.code, 0, "an agent token never adjudicates");
    assert!(refused.stderr.contains("adjudicate"), "{}", refused.stderr);
    let listed = admin.run(&["token", "list", "--json"]).await;
    let cli_judge = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "cli-judge")
        .cloned()
        .unwrap();
    assert_eq!(cli_judge["adjudicate"], true, "{cli_judge}");
}

/// On every backend: the database refuses to move a quest out of REVIEW on
/// one look of the two it needs (a look without a token is nobody's), and
/// takes the move with both; looks that disagree move only by an adjudication.
#[tokio::test]
async fn raw_sql_cannot_decide_a_quest_on_one_look_of_two() {
    for app in ratchet_apps("raw_sql_cannot_decide_a_quest_on_one_look_of_two").await {
        let quests = two_reviewer_quests(&app, 2).await;
        let quest = quests[0].clone();
        let ana = reviewer(&app, "ana", false).await;
        decide(&app, &ana, &quest, "approve", "").await.expect(200);
        let mut db = raw(&app).await;
        let mv = format!(
            "UPDATE quests SET state = 'PASS', decided_by = 'reviewer:ana' WHERE id = '{quest}'"
        );
        let err = db
            .execute(&mv)
            .await
            .expect_err("one look of two decides nothing");
        assert!(
            refused_by_a_rule(&err) && err.contains("reviewers agree"),
            "{err}"
        );
        let frozen = format!("UPDATE quests SET reviews_required = 1 WHERE id = '{quest}'");
        let err = db
            .execute(&frozen)
            .await
            .expect_err("the number of reviewers is fixed");
        assert!(err.contains("number of reviewers never changes"), "{err}");
        // A look recorded without a token is no second reviewer.
        let look = |quest: &str, token: &str, decision: &str, look: &str| {
            format!(
                "INSERT INTO review_decisions (id, quest_id, reviewer, reviewer_token, decision, note, created_at, bulk, look, decides)
                 VALUES ('{}', '{quest}', 'someone', {token}, '{decision}', 'n', '2026-01-01T00:00:00Z', false, '{look}', false)",
                uuid::Uuid::new_v4()
            )
        };
        db.execute(&look(&quest, "NULL", "approve", "first"))
            .await
            .expect("a decision row");
        let err = db
            .execute(&mv)
            .await
            .expect_err("a token-less look is nobody");
        assert!(err.contains("reviewers agree"), "{err}");
        // A second agreeing look by another token, and the same move is taken.
        let token = app.get("/v1/tokens", &app.admin).await.expect(200);
        let ben_id = token
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "admin")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let second = format!(
            "INSERT INTO review_decisions (id, quest_id, reviewer, reviewer_token, decision, note, created_at, bulk, look, decides)
             VALUES ('{}', '{quest}', 'admin', '{ben_id}', 'approve', '', '2026-01-01T00:00:00Z', false, 'first', true)",
            uuid::Uuid::new_v4()
        );
        db.execute(&second).await.expect("a decision row");
        db.execute(&mv).await.expect("two agreeing looks move it");
        assert_eq!(app.quest(&quest).await["state"], "PASS");

        // Looks that disagree: however many agree with the move, it waits for an adjudication.
        let other = &quests[1];
        decide(&app, &ana, other, "approve", "").await.expect(200);
        let cy = reviewer(&app, "cy", false).await;
        decide(&app, &cy, other, "reject", "not theirs")
            .await
            .expect(200);
        db.execute(&look(other, &format!("'{ben_id}'"), "approve", "first"))
            .await
            .expect("a decision row");
        let mv = format!(
            "UPDATE quests SET state = 'PASS', decided_by = 'reviewer:ana' WHERE id = '{other}'"
        );
        let err = db
            .execute(&mv)
            .await
            .expect_err("disagreeing looks need an adjudicator");
        assert!(err.contains("reviewers agree"), "{err}");
        db.execute(&look(
            other,
            &format!("'{ben_id}'"),
            "approve",
            "adjudication",
        ))
        .await
        .expect("a decision row");
        db.execute(&mv).await.expect("an adjudication moves it");
    }
}

/// `GET /v1/sessions/{id}/reviewers`: the kappa of two reviewers over 12
/// shared quests against one computed by hand, each one's figures, and no
/// kappa (with its reason) under 10 shared quests.
#[tokio::test]
async fn the_reviewers_agreement_is_measured_with_cohens_kappa() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 12).await;
    let (ana, ben) = (
        reviewer(&app, "ana", false).await,
        reviewer(&app, "ben", false).await,
    );
    // crate::console::kappa_table: kappa 32/68 by hand.
    for (q, (a, b)) in quests.iter().zip(crate::console::kappa_table()) {
        decide(&app, &ana, q, a, "ana's note").await.expect(200);
        decide(&app, &ben, q, b, "ben's note").await.expect(200);
        if a != b {
            // The admin sides with ben.
            decide(&app, &app.admin, q, b, "as ben says")
                .await
                .expect(200);
        }
    }
    let figures = app
        .get(
            &format!(
                "/v1/sessions/{}/reviewers",
                session_of(&app, &quests[0]).await
            ),
            &ben,
        )
        .await
        .expect(200);
    assert_eq!(figures["reviewers_per_quest"], 2);
    let pair = &figures["pairs"][0];
    assert_eq!(
        (
            pair["a"].as_str(),
            pair["b"].as_str(),
            pair["shared"].as_u64()
        ),
        (Some("ana"), Some("ben"), Some(12))
    );
    assert_eq!(pair["agreement"], 0.75);
    // The quality figures put the same beside the rows people decided.
    let session = session_of(&app, &quests[0]).await;
    let quality = app
        .get(&format!("/v1/sessions/{session}/quality"), &app.admin)
        .await
        .expect(200);
    assert_eq!(quality["reviewer_disagreement"], 0.25, "{quality}");
    // PASS: the 6 both approved and the 1 the adjudicator approved.
    assert_eq!(quality["decided_by_person"], 7, "{quality}");
    // po = 9/12; ana rejects 4/12, ben 5/12; pe = (4*5 + 8*7) / 144 = 76/144; kappa = 32/68.
    assert!(
        (pair["kappa"].as_f64().unwrap() - 32.0 / 68.0).abs() < 1e-9,
        "{pair}"
    );
    assert_eq!(pair["kappa_reason"], Value::Null);
    let of = |name: &str| {
        figures["reviewers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["reviewer"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            of("ana")["decisions"].as_u64(),
            of("ana")["overruled"].as_u64()
        ),
        (Some(12), Some(3))
    );
    assert_eq!(
        (
            of("ben")["first_looks"].as_u64(),
            of("ben")["overruled"].as_u64()
        ),
        (Some(12), Some(0))
    );
    assert_eq!(
        (
            of("admin")["adjudications"].as_u64(),
            of("admin")["first_looks"].as_u64()
        ),
        (Some(3), Some(0))
    );

    // Another session: 9 shared quests give no kappa, and say why.
    let few = two_reviewer_quests(&app, 9).await;
    for q in &few {
        decide(&app, &ana, q, "approve", "").await.expect(200);
        decide(&app, &ben, q, "approve", "").await.expect(200);
    }
    let figures = app
        .get(
            &format!("/v1/sessions/{}/reviewers", session_of(&app, &few[0]).await),
            &app.admin,
        )
        .await
        .expect(200);
    let pair = &figures["pairs"][0];
    assert_eq!(
        (pair["shared"].as_u64(), &pair["kappa"]),
        (Some(9), &Value::Null)
    );
    assert_eq!(pair["kappa_reason"], "fewer than 10 shared quests (9)");
}

async fn session_of(app: &TestApp, quest: &str) -> String {
    app.quest(quest).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The export of a session with several reviewers gives every decision of a
/// decided quest, and none of one still waiting for its second look.
#[tokio::test]
async fn the_export_shows_every_decision_once_the_quest_is_decided() {
    let app = spawn_app().await;
    let quests = two_reviewer_quests(&app, 2).await;
    let (ana, ben) = (
        reviewer(&app, "ana", false).await,
        reviewer(&app, "ben", false).await,
    );
    decide(&app, &ana, &quests[0], "approve", "on the page")
        .await
        .expect(200);
    decide(&app, &ben, &quests[0], "approve", "agreed")
        .await
        .expect(200);
    decide(&app, &ana, &quests[1], "reject", "wrong firm")
        .await
        .expect(200);
    let session = session_of(&app, &quests[0]).await;
    let (status, body) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=jsonl"))
        .await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = String::from_utf8(body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decided = lines
        .iter()
        .find(|l| l["quest_state"] == "PASS")
        .expect("the decided quest");
    let reviews: Value = serde_json::from_str(decided["quest_reviews"].as_str().unwrap()).unwrap();
    assert_eq!(
        reviews,
        json!([
            {"reviewer": "ana", "decision": "approve", "look": "first", "note": "on the page"},
            {"reviewer": "ben", "decision": "approve", "look": "first", "note": "agreed"}
        ])
    );
    assert_eq!(decided["quest_decided_by"], "reviewers:ana,ben");
    let waiting = lines
        .iter()
        .find(|l| l["quest_state"] == "REVIEW")
        .expect("the waiting quest");
    assert_eq!(
        waiting["quest_reviews"],
        Value::Null,
        "no look shows before the quest is decided"
    );
}

/// `review.overlap_rate` asks for the second look on a share of quests only,
/// drawn per quest and kept on it; a quest drawn for one look decides on it.
#[tokio::test]
async fn an_overlap_rate_asks_for_the_second_look_on_a_share_of_quests() {
    let app = spawn_app().await;
    let mut config = crate::helpers::contact_config(3);
    config["review"] = json!({"reviewers": 2, "overlap_rate": 0.5});
    let session = app.scan(config, crate::helpers::companies(41)).await;
    let agent = app
        .token("agent", &crate::console::agent_token_name(&session))
        .await;
    let quests = crate::console::reviews(&app, &agent, &session, 40).await;
    let (open, _) = crate::helpers::assigned(&app.next(&agent, &session, "bot").await);
    assert_eq!(
        app.quest(&open).await["reviews_required"],
        Value::Null,
        "the draw is a quest's once it enters REVIEW, and not shown before"
    );
    let mut needs = std::collections::BTreeMap::<u64, Vec<String>>::new();
    for q in &quests {
        let n = app.quest(q).await["reviews_required"].as_u64().unwrap();
        needs.entry(n).or_default().push(q.clone());
    }
    let (one, two) = (
        needs.get(&1).map_or(0, Vec::len),
        needs.get(&2).map_or(0, Vec::len),
    );
    assert_eq!(one + two, 40, "{needs:?}");
    assert!(
        (5..=35).contains(&two),
        "about half drawn for two looks: {two} of 40"
    );
    let ana = reviewer(&app, "ana", false).await;
    let single = decide(&app, &ana, &needs[&1][0], "approve", "")
        .await
        .expect(200);
    assert_eq!(
        (single["state"].as_str(), single["decided_by"].as_str()),
        (Some("PASS"), Some("reviewer:ana"))
    );
    let double = decide(&app, &ana, &needs[&2][0], "approve", "")
        .await
        .expect(200);
    assert_eq!(
        double["state"], "REVIEW",
        "a drawn quest waits for its second look"
    );

    let mut bad = crate::helpers::contact_config(3);
    bad["review"] = json!({"overlap_rate": 0.5});
    let items = crate::helpers::companies(1);
    let refused = app
        .post(
            "/v1/sessions",
            &app.admin,
            json!({"config": bad, "items": items}),
        )
        .await;
    refused.refused(422, "invalid_config");
    assert!(
        refused
            .body
            .to_string()
            .contains("review.reviewers above 1"),
        "{}",
        refused.body
    );
}
