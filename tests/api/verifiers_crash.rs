//! The L2 jobs outlive what can happen to a server: a restart or a `kill -9`
//! while the verifiers work, a store that fails to record an answer, a job
//! queued twice. No job is lost, no recorded answer is asked for again, and
//! every quest ends PASS or REVIEW.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{Behaviour, FakeLlm};
use crate::helpers::*;
use crate::verifiers::{QUESTION, submit_next, three, verified_config, verifiers_toml};

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
                    idempotency_key: None,
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
        .create_token(quest::store::NewToken::new(
            "bot",
            quest::domain::Role::Agent,
            "hash",
        ))
        .await
        .unwrap();
    let mut config = contact_config(3);
    config["verify"] = json!({"verifiers": ["alpha"], "questions": [QUESTION]});
    let input = json!({"company": "Acme"}).as_object().unwrap().clone();
    let session = store
        .create_session(NewSession {
            review_key: None,
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
                idempotency_key: None,
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
