//! Many agents at once: no double leases, every quest ends terminal, and a
//! status poller never sees `remaining` rise or the sum break.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::helpers::*;

const AGENTS: usize = 16;
const QUESTS: usize = 500;

/// What an agent submits for the quest with this key: some fail first, some go to review.
fn result_for(key: &str, attempt: u32) -> Value {
    let n: usize = key.trim_start_matches("Company ").parse().unwrap();
    match (n % 7, n % 3, attempt) {
        (0, _, _) => json!({"email": format!("c{n}@firm.test"), "confidence": "low"}),
        (_, 0, 0) => json!({"email": "not an email"}),
        _ => json!({"email": format!("c{n}@firm.test")}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_agents_over_five_hundred_quests_never_share_one() {
    let app = Arc::new(spawn_app().await);
    let token = app.token("agent", "swarm").await;
    let session = app.scan(contact_config(3), companies(QUESTS)).await;
    let holders: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let poller = {
        let (app, session, done) = (app.clone(), session.clone(), done.clone());
        tokio::spawn(async move {
            let mut last = u64::MAX;
            let mut polls = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let status = app.status(&session).await;
                assert_sums(&status);
                let remaining = status["remaining"].as_u64().unwrap();
                assert!(
                    remaining <= last,
                    "remaining rose from {last} to {remaining}"
                );
                last = remaining;
                polls += 1;
            }
            polls
        })
    };

    let mut agents = Vec::new();
    for agent in 0..AGENTS {
        let (app, token, session, holders) =
            (app.clone(), token.clone(), session.clone(), holders.clone());
        agents.push(tokio::spawn(async move {
            let mut finished = 0;
            loop {
                let next = app.next(&token, &session, &format!("agent-{agent}")).await;
                match next["status"].as_str().unwrap() {
                    "finished" => return finished,
                    "wait" => {
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        continue;
                    }
                    _ => {}
                }
                let (quest, lease) = assigned(&next);
                if let Some(other) = holders.lock().unwrap().insert(quest.clone(), agent) {
                    panic!("quest {quest} leased to agent {agent} while agent {other} holds it");
                }
                let key = next["quest"]["key"].as_str().unwrap().to_owned();
                for attempt in 0.. {
                    let answer = app
                        .submit(&token, &quest, &lease, result_for(&key, attempt))
                        .await
                        .expect(200);
                    if answer["state"] != "TODO" {
                        break;
                    }
                }
                holders.lock().unwrap().remove(&quest);
                finished += 1;
            }
        }));
    }
    let mut finished = 0;
    for agent in agents {
        finished += agent.await.expect("no agent panicked");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(poller.await.expect("the poller saw no broken invariant") > 0);
    assert_eq!(
        finished, QUESTS,
        "each quest was finished by exactly one agent"
    );

    let status = app.status(&session).await;
    assert_sums(&status);
    crate::ratchet::assert_counters_match_the_rows(&app, &session).await;
    let expected_review = (0..QUESTS).filter(|n| n % 7 == 0).count() as u64;
    assert_eq!(status["remaining"], 0);
    assert_eq!(status["review"], expected_review);
    assert_eq!(status["pass"], QUESTS as u64 - expected_review);
    let fails = (0..QUESTS).filter(|n| n % 7 != 0 && n % 3 == 0).count() as u64;
    assert_eq!(status["submissions"], QUESTS as u64 + fails);
}
