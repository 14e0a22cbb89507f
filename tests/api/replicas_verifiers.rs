//! A replica killed while its AI verifiers wait on the model: its L2 jobs are
//! claimed in the database, so the survivors ask them again once the claims
//! lapse, and no question is asked twice while its claim lives.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::{
    Cluster, Log, ONE_CLUSTER_AT_A_TIME, agreed_status, checked_config, get, slow_gate,
    spawn_agents, within,
};
use crate::fake_llm::{Behaviour, FakeLlm};
use crate::helpers::companies;
use crate::postgres::TestDatabase;
use crate::verifiers::{QUESTION, verifiers_toml};

/// The slow command gate of the cluster tests, its `email` field shown to the
/// verifier `alpha`, served at `llm` (which waits up to `timeout_ms`).
fn gate_and_verifier(dir: &Path, llm: &str, timeout_ms: u64) -> PathBuf {
    let toml = slow_gate(dir);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&toml)
        .unwrap();
    // Still inside [gates.check]: the fields a verifier may see.
    writeln!(file, "result_fields = [\"email\"]\n").unwrap();
    file.write_all(verifiers_toml(&[("alpha", llm, timeout_ms, 4)]).as_bytes())
        .unwrap();
    toml
}

/// The quest key a chat-completions request asks about.
fn asked_about(request: &serde_json::Value) -> String {
    let user = request["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let start = user
        .find("Company ")
        .expect("the quest's input in the question");
    user[start..start + "Company 0000".len()].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_while_its_verifiers_wait_leaves_its_l2_jobs_to_the_survivors_asked_once()
{
    let test =
        "a_replica_killed_while_its_verifiers_wait_leaves_its_l2_jobs_to_the_survivors_asked_once";
    let Some(db) = TestDatabase::create_or_skip(test).await else {
        return;
    };
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    // The survivors' model answers at once; replica 2's never does.
    let answering = FakeLlm::start(
        "judge-alpha",
        Behaviour::says("NO: it is the company's own"),
    )
    .await;
    let hanging = FakeLlm::start("judge-alpha", Behaviour::Hang).await;
    let (etc_ok, etc_hang) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ok = gate_and_verifier(etc_ok.path(), &answering.base_url, 60_000);
    let hang = gate_and_verifier(etc_hang.path(), &hanging.base_url, 600_000);
    let mut cluster = Cluster::start_each(
        &db,
        [(Some(&ok), true), (Some(&hang), true), (Some(&ok), true)],
    )
    .await;
    let quests = 24;
    let mut config = checked_config(30);
    config["verify"] = serde_json::json!({
        "verifiers": ["alpha"], "questions": [QUESTION], "flag_threshold": 1, "quorum": 1
    });
    let session = cluster.create_session(0, config, companies(quests)).await;

    // The agents submit on replicas 0 and 2 without waiting: every replica
    // with workers races for the checks, so replica 1 decides some of them
    // and asks their verifier questions itself.
    let log = Arc::new(Mutex::new(Log::default()));
    let agents = spawn_agents(&cluster, &[0, 2], &session, 6, 0, false, &log);
    within(
        "replica 1 asking its model about two quests",
        Duration::from_secs(120),
        async {
            while hanging.requests().len() < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    cluster.replicas[1].kill().await;
    let killed = std::time::Instant::now();
    let stranded: Vec<String> = hanging.requests().iter().map(asked_about).collect();
    // Replica 1 renewed its claims every CLAIM_SECONDS / 3 until it died, so
    // each lives about 2/3 of CLAIM_SECONDS after the kill (less a second for
    // a renewal late under load): no survivor may ask a stranded question
    // before then.
    let claim_lives =
        Duration::from_secs(u64::from(quest::workers::claims::CLAIM_SECONDS) * 2 / 3 - 1);
    let taken_over = within(
        "a survivor asking a stranded question",
        Duration::from_secs(120),
        async {
            loop {
                let asked: Vec<String> = answering.requests().iter().map(asked_about).collect();
                if stranded.iter().any(|k| asked.contains(k)) {
                    return killed.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    assert!(
        taken_over >= claim_lives,
        "a stranded question was asked {taken_over:?} after the kill, while replica 1's claim lived ({claim_lives:?})"
    );

    within(
        "the survivors' agents finishing the session, verifiers included",
        Duration::from_secs(180),
        async {
            for agent in agents {
                agent.await.unwrap();
            }
        },
    )
    .await;
    let status = agreed_status(&cluster, &[0, 2], &session).await;
    assert_eq!(
        (status["remaining"].as_u64(), status["pass"].as_u64()),
        (Some(0), Some(quests as u64)),
        "every quest cleared by the verifier and locked PASS: {status}"
    );

    // Every quest's question was answered on a survivor exactly once, the
    // stranded ones after the kill.
    let mut asked: HashMap<String, usize> = HashMap::new();
    for key in answering.requests().iter().map(asked_about) {
        *asked.entry(key).or_default() += 1;
    }
    assert_eq!(asked.len(), quests, "every quest asked: {asked:?}");
    assert!(
        asked.values().all(|n| *n == 1),
        "no question asked twice: {asked:?}"
    );
    let client = &cluster.client;
    for key in &stranded {
        let entry = log
            .lock()
            .unwrap()
            .leases
            .iter()
            .find(|l| &l.1 == key)
            .cloned()
            .expect("the stranded quest was leased");
        let view = get(client, &cluster.base(2), &format!("/v1/quests/{}", entry.0))
            .await
            .expect("a survivor answers");
        assert_eq!(view["state"], "PASS", "{view}");
        let answers = view["l2_answers"].as_array().unwrap();
        assert_eq!(answers.len(), 1, "one stored answer for {key}: {view}");
        assert_eq!(answers[0]["answer"], "no", "{view}");
    }
}
