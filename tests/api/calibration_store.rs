//! The store's contract for calibration, on every backend: labels are
//! non-bulk review decisions, a floor records its switches with their
//! figures, and an audit sample reaches REVIEW.

use quest::domain::ids::{SessionId, TokenId};
use quest::domain::session::SessionConfig;
use quest::domain::table::Row;
use quest::domain::verify::calibration::{Confusion, Standing};
use quest::domain::verify::{Answer, Artifact, Contract, VerifierRequest};
use quest::domain::work::ReviewerId;
use quest::domain::{Decision, Role, State, Verdict};
use quest::store::{NewL2Answer, NewSession, Store, SubmitOutcome};
use serde_json::{Map, Value, json};

use crate::contract::{backends, decision, lease_all, result};
use crate::helpers::contact_config;

/// A session of `n` quests with one verifier `judge` under `verify` settings.
async fn verified_session(store: &dyn Store, n: usize, verify: Value) -> SessionId {
    let mut config = contact_config(3);
    config["verify"] = verify;
    let rows = (0..n)
        .map(|i| {
            let input: Map<String, Value> = json!({"company": format!("c{i}")})
                .as_object()
                .unwrap()
                .clone();
            (format!("c{i}"), Row::from_map(&input))
        })
        .collect();
    store
        .create_session(NewSession {
            review_key: None,
            id: SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: SessionConfig::parse(config).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.jsonl".into(),
            source_type: "application/x-ndjson".into(),
            source: Vec::new(),
            created_by: "admin".into(),
            rows,
        })
        .await
        .unwrap()
        .id
}

#[tokio::test]
async fn labels_are_single_decisions_and_a_floor_records_its_switch_with_the_figures() {
    for b in backends("labels_are_single_decisions_and_a_floor_records_its_switch").await {
        let store = b.store.as_ref();
        // audit_rate 1: the quests the judge clears reach a person too.
        let s = verified_session(
            store,
            11,
            json!({"verifiers": ["judge"], "questions": ["Is it wrong?"], "quorum": 1,
                   "min_kappa": 0.5, "min_labels": 10, "audit_rate": 1.0}),
        )
        .await;
        let agent = TokenId::new();
        let t = store
            .create_token(quest::store::NewToken::new(
                "ana",
                Role::Reviewer,
                "hash-ana",
            ))
            .await
            .unwrap();
        let ana = ReviewerId::new(t.id, "ana");
        let mut quests = Vec::new();
        for i in 0..11 {
            let [(quest, lease)] = lease_all(store, s, agent, 1).await[..] else {
                panic!()
            };
            let mut pass = decision(Verdict::Pass);
            pass.verify = Some(VerifierRequest {
                contract: Contract {
                    task: "t".into(),
                    input: json!({}),
                },
                artifact: Artifact {
                    result: json!({}),
                    evidence: vec![],
                },
            });
            let outcome = store
                .submit(result(quest, lease, agent, "a@b.test"), Some(pass))
                .await
                .unwrap();
            let SubmitOutcome::Recorded { l2_jobs, .. } = outcome else {
                panic!("{}: recorded", b.name)
            };
            // The judge flags the even quests and the last; the reviewer approves all.
            let flag = i % 2 == 0 || i == 10;
            let recorded = store
                .record_l2_answer(NewL2Answer {
                    job_id: l2_jobs[0],
                    model: "m".into(),
                    raw_reply: Some("x".into()),
                    answer: Some(if flag { Answer::Yes } else { Answer::No }),
                    detail: "x".into(),
                    attempts: 1,
                    latency_ms: 1,
                })
                .await
                .unwrap();
            let q = recorded.verified.expect("the last answer decides");
            assert_eq!(q.state, State::Review, "{}: quest {i}", b.name);
            let audited = q.last_facts.iter().any(|f| f.check == "audit");
            assert_eq!(audited, !flag, "{}: quest {i} audited", b.name);
            quests.push(quest);
        }
        for quest in &quests[..10] {
            store
                .decide_review(*quest, &ana, Decision::Approve, "fine")
                .await
                .unwrap();
        }
        store
            .decide_review_in_bulk(quests[10], &ana, Decision::Reject, "bulk")
            .await
            .unwrap();

        let c = store.calibration(Some(s), 100).await.unwrap();
        // Quests 0..10 are labels, of which 0, 2, 4, 6 and 8 flagged: 5 flags
        // overruled, 5 clear answers approved; the bulk rejection of 10 is no label.
        let table = Confusion {
            upheld: 0,
            overruled: 5,
            missed: 0,
            cleared: 5,
        };
        assert_eq!(c.confusion.len(), 1, "{}", b.name);
        assert_eq!(
            (
                c.confusion[0].verifier.as_str(),
                c.confusion[0].question_index,
                c.confusion[0].confusion
            ),
            ("judge", Some(0), table),
            "{}",
            b.name
        );
        // Reviewers approved everything: po = 1/2, pe = 1/2, kappa 0 < 0.5.
        assert_eq!(c.switches.len(), 1, "{}", b.name);
        let sw = &c.switches[0];
        assert_eq!(
            (
                sw.standing,
                sw.confusion,
                sw.kappa,
                sw.min_kappa,
                sw.min_labels
            ),
            (Standing::Advisory, table, 0.0, 0.5, 10),
            "{}",
            b.name
        );
        assert_eq!(c.disagreements.len(), 5, "{}", b.name);
        assert!(
            c.disagreements
                .iter()
                .all(|d| d.flagged && d.decision == Decision::Approve && d.quest_id != quests[10]),
            "{}",
            b.name
        );
        let server = store.calibration(None, 0).await.unwrap();
        assert_eq!(server.confusion[0].question_index, None, "{}", b.name);
        assert_eq!(server.confusion[0].confusion, table, "{}", b.name);
        assert!(server.disagreements.is_empty(), "{}", b.name);
    }
}
