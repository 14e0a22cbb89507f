//! One session cannot starve another of the gate workers: a command gate
//! that blocks on a barrier (a file per check, made by the test) holds every
//! worker for session A, with many more of A's checks queued behind; the
//! first worker A gives back goes to session B's check, not to A's next one.
//! Re-checks share the same workers, at most half of them while checks wait.
//! Which check started when, and how many ran then, is read from what the
//! gate logged; no time is measured.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// The gate logs the `tag` of each result it starts on and how many of its
/// runs are under way then (this one included), then waits until the test
/// makes `go.<tag>` (or `go.all`) before it passes the result.
const BARRIER: &str = r#"input=$(/bin/cat)
tag=$(printf '%s' "$input" | /bin/sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p')
/bin/mkdir -p running
: > "running/$tag"
echo "$tag $(/bin/ls running | /usr/bin/wc -l)" >> started.log
while [ ! -e "go.$tag" ] && [ ! -e go.all ]; do /bin/sleep 0.01; done
/bin/rm -f "running/$tag"
echo '{"verdict": "PASS"}'
"#;

const WORKERS: usize = 4;

/// A server with `WORKERS` gate workers and the command gate `barrier`;
/// the returned dir is the gate's working directory.
async fn spawn_with_barrier() -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("barrier.sh"), BARRIER).unwrap();
    let toml = format!(
        "[gates.barrier]\nkind = \"command\"\nallow_root = true\nargv = [\"/bin/sh\", \"./barrier.sh\"]\n\
         workdir = \"{}\"\ntimeout_ms = 120000\n",
        dir.path().display()
    );
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), Some(&toml), |c| {
        c.gate_workers = WORKERS;
    })
    .await;
    (app, dir)
}

fn barrier_config() -> Value {
    json!({
        "key_column": "company",
        "max_tries": 3,
        "gate": {"kind": "command", "name": "barrier"},
        "prompt": {"instructions": "Find the contact email of the company."}
    })
}

/// The tags of the checks the gate started, in the order it started them.
fn started(dir: &Path) -> Vec<String> {
    runs(dir).into_iter().map(|(tag, _)| tag).collect()
}

/// Each check the gate started, with how many of its runs were under way.
fn runs(dir: &Path) -> Vec<(String, usize)> {
    std::fs::read_to_string(dir.join("started.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (tag, running) = line.split_once(' ')?;
            Some((tag.to_owned(), running.trim().parse().ok()?))
        })
        .collect()
}

fn release(dir: &Path, tag: &str) {
    std::fs::write(dir.join(format!("go.{tag}")), "").unwrap();
}

/// Waits until the gate has started `n` checks; their tags.
async fn starts(dir: &Path, n: usize) -> Vec<String> {
    for _ in 0..3000 {
        let tags = started(dir);
        if tags.len() >= n {
            return tags;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the gate started {:?}, not {n} checks", started(dir));
}

/// Leases `n` quests of `session` for agents `<prefix>0..` of one token and
/// submits each (tagged with its agent's name) without waiting for its
/// verdict; the quests, in order.
async fn submit_all(
    app: &TestApp,
    token: &str,
    session: &str,
    n: usize,
    prefix: &str,
) -> Vec<String> {
    let mut quests = Vec::new();
    for i in 0..n {
        let tag = format!("{prefix}{i}");
        let (quest, lease) = assigned(&app.next(token, session, &tag).await);
        app.post(
            &format!("/v1/quests/{quest}/submit?wait=0"),
            token,
            json!({"lease_id": lease, "result": {"email": "info@a.test", "tag": tag}}),
        )
        .await
        .expect(202);
        quests.push(quest);
    }
    quests
}

#[tokio::test]
async fn a_session_holding_every_worker_with_64_checks_queued_gets_none_back_before_another_sessions_check_starts()
 {
    let (app, dir) = spawn_with_barrier().await;
    // A's agents hold a lease each until their checks end: past the default cap.
    let token_a = app
        .post(
            "/v1/tokens",
            &app.admin,
            json!({"name": "a", "role": "agent", "max_leases": 100}),
        )
        .await
        .expect(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let token_b = app.token("agent", "b").await;
    let session_a = app.scan(barrier_config(), companies(WORKERS + 64)).await;
    let session_b = app.scan(barrier_config(), companies(1)).await;

    // One token with many agent names, alone: it is not throttled.
    submit_all(&app, &token_a, &session_a, WORKERS + 64, "a").await;
    let first = starts(dir.path(), WORKERS).await;
    assert!(first.iter().all(|t| t.starts_with('a')), "{first:?}");
    assert_eq!(
        first.len(),
        WORKERS,
        "every worker holds a check of A's, no more"
    );

    let quest_b = submit_all(&app, &token_b, &session_b, 1, "b").await;
    release(dir.path(), &first[0]);
    let tags = starts(dir.path(), WORKERS + 1).await;
    assert_eq!(
        tags[WORKERS], "b0",
        "the worker A gave back went to B's check, ahead of A's 64: {tags:?}"
    );

    std::fs::write(dir.path().join("go.all"), "").unwrap();
    assert_eq!(app.settled(&quest_b[0]).await["state"], "PASS");
}

#[tokio::test]
async fn rechecks_share_the_gate_workers_and_take_at_most_half_while_checks_wait() {
    let (app, dir) = spawn_with_barrier().await;
    let token = app.token("agent", "a").await;
    // Eight PASS quests to re-check, passed at once (their barriers are open).
    let passed = app.scan(barrier_config(), companies(8)).await;
    for i in 0..8 {
        release(dir.path(), &format!("r{i}"));
    }
    for quest in submit_all(&app, &token, &passed, 8, "r").await {
        assert_eq!(app.settled(&quest).await["state"], "PASS");
    }
    for i in 0..8 {
        std::fs::remove_file(dir.path().join(format!("go.r{i}"))).unwrap();
    }
    std::fs::remove_file(dir.path().join("started.log")).unwrap();

    // Alone, the re-checks take every worker.
    app.post(
        &format!("/v1/sessions/{passed}/recheck"),
        &app.admin,
        json!({}),
    )
    .await
    .expect(202);
    let first = starts(dir.path(), WORKERS).await;
    assert!(first.iter().all(|t| t.starts_with('r')), "{first:?}");

    // Checks arrive: they wait for a worker of the same pool, and the two
    // workers the re-checks give back go to them (at most half stay re-checks).
    let waiting = app.scan(barrier_config(), companies(4)).await;
    submit_all(&app, &token, &waiting, 4, "s").await;
    release(dir.path(), &first[0]);
    release(dir.path(), &first[1]);
    let tags = starts(dir.path(), WORKERS + 2).await;
    // The two start at once: which of them logs first is a race of the gates'.
    let mut next = tags[WORKERS..WORKERS + 2].to_vec();
    next.sort();
    assert_eq!(next, ["s0", "s1"], "{tags:?}");
    std::fs::write(dir.path().join("go.all"), "").unwrap();
    let most = runs(dir.path()).iter().map(|(_, n)| *n).max();
    assert!(
        most <= Some(WORKERS),
        "re-checks and checks ran {most:?} at once on {WORKERS} workers: {:?}",
        runs(dir.path())
    );
}
