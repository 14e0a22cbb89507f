//! The demo run to its end, and the smaller traps of the CLI and the scan
//! (issue 20, point 8), one test each:
//! `--watch` into a pipe, an empty `QUEST_SESSION`, `quest status` on one
//! session, `serve`/`demo` without client options, the demo's export and
//! review header, "1 quest remains", and keys that repeat.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::cli::{Shell, exits};
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_writes_no_escape_codes_into_a_pipe() {
    let app = spawn_app().await;
    app.scan(contact_config(3), companies(2)).await;
    let admin = Shell::new(&app, &app.admin, None, "ops");
    let mut child = admin
        .command(&["status", "--watch"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Two refreshes come two seconds apart; then it is stopped.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.matches("contacts").count() >= 2,
        "two tables: {shown}"
    );
    assert!(
        !shown.contains('\x1b'),
        "no escape code in a pipe: {shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_quest_session_is_unset_and_status_honours_a_set_one() {
    let app = spawn_app().await;
    let first = app.scan(contact_config(3), companies(2)).await;
    let second = app.scan(contact_config(3), companies(5)).await;

    let empty = Shell::new(&app, &app.admin, Some(""), "ops");
    let all = empty.run(&["status", "--json"]).await;
    exits(&all, 0);
    assert_eq!(all.json().as_array().unwrap().len(), 2, "{}", all.stdout);
    let prompt = empty.run(&["agent-prompt"]).await;
    exits(&prompt, 0);
    assert!(
        prompt.stdout.contains(&second),
        "the most recent: {}",
        prompt.stdout
    );

    let one = Shell::new(&app, &app.admin, Some(&first), "ops");
    let only = one.run(&["status", "--json"]).await;
    exits(&only, 0);
    let listed = only.json();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first.as_str()], "{}", only.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_demo_neither_list_nor_take_the_client_options() {
    for command in ["serve", "demo"] {
        let out = quest_binary()
            .args([command, "--help"])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        for option in ["--session", "--token ", "--agent", "--json", "--state-dir"] {
            assert!(
                !help.contains(option),
                "{command} --help lists {option}: {help}"
            );
        }
    }
    let next = quest_binary()
        .args(["next", "--help"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&next.stdout).contains("--session"));
    let out = quest_binary()
        .args(["serve", "--agent", "bot"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--agent is an option of the client verbs"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quest_demo_runs_to_completion_and_its_own_check_holds() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("demo.csv");
    let out = crate::helpers::quest_binary()
        .args(["demo", "--output"])
        .arg(&output)
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = |pattern: &str| -> u64 {
        let found = regex::Regex::new(pattern).unwrap().captures(&stdout);
        found.unwrap_or_else(|| panic!("`{pattern}` in {stdout}"))[1]
            .parse()
            .unwrap()
    };
    assert_eq!(
        count(r"agents are done; (\d+) waits? for a person"),
        count(r"Review queue \((\d+) quests"),
        "the backlog's words count the review queue: {stdout}"
    );
    assert!(!stdout.contains("every quest decided"), "{stdout}");
    assert!(
        stdout.contains("0 left with the agents")
            && stdout.contains("0 accepted")
            && stdout.contains("OK"),
        "{stdout}"
    );
    for agent in ["careful", "sloppy", "inventing", "freemail"] {
        assert!(stdout.contains(agent), "{agent} worked: {stdout}");
    }
    // The agent that invents addresses burns its quests to DONE: it is paused,
    // and the check counts the pause.
    assert!(
        stdout.contains("paused: inventing after 3 quests in a row ended DONE")
            && stdout.contains("agents paused (")
            && !stdout.contains("paused: careful"),
        "{stdout}"
    );
    let export = std::fs::read_to_string(&output).unwrap();
    assert!(export.starts_with("company,city,quest_state"), "{export}");
    assert_eq!(export.lines().count(), 31, "30 companies and a header");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_keeps_its_export_in_its_data_dir_and_counts_the_review_queue() {
    let dir = tempfile::tempdir().unwrap();
    let out = quest_binary()
        .arg("demo")
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        !dir.path().join("quest-demo.xlsx").exists(),
        "nothing is written into the working directory"
    );
    let kept = stdout
        .lines()
        .find_map(|l| l.strip_prefix("The demo's data dir is kept: "))
        .unwrap_or_else(|| panic!("the kept data dir is named: {stdout}"));
    let export = std::path::Path::new(kept).join("quest-demo.xlsx");
    assert!(export.is_file(), "{}: {stdout}", export.display());
    let queued: usize = stdout
        .split("Review queue (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a review queue header: {stdout}"));
    // The simulated world is fixed: 30 companies leave more in review than are listed.
    assert!(queued > 4, "{stdout}");
    assert!(
        stdout.contains(&format!("  … and {} more", queued - 4)),
        "the header counts what is listed: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_quest_remains_in_the_singular() {
    let app = spawn_app().await;
    let token = app.token("agent", "bots").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let bot = Shell::new(&app, &token, Some(&session), "bot-1");
    exits(&bot.run(&["next"]).await, 0);
    let submit = bot
        .run(&["submit", "--field", "email=info@company0000.test"])
        .await;
    exits(&submit, 0);
    assert!(
        submit.stdout.contains("1 quest remains in this session."),
        "{}",
        submit.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_keys_are_refused_in_every_format_unless_the_session_allows_them() {
    let app = spawn_app().await;
    let items = json!([
        {"company": "Acme", "city": "Seoul"},
        {"company": "Beta", "city": "Busan"},
        {"company": " Acme ", "city": "Daegu"}
    ]);
    let refused = app
        .post(
            "/v1/sessions",
            &app.admin,
            json!({"config": contact_config(3), "items": items}),
        )
        .await;
    refused.refused(422, "duplicate_keys");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("data rows 1 and 3") && message.contains("allow_duplicate_keys"),
        "{message}"
    );
    let csv = "company,city\nAcme,Seoul\nBeta,Busan\nBeta ,Daegu\nAcme,Jeju\n";
    let refused = app
        .scan_file("firms.csv", csv.as_bytes().to_vec(), contact_config(3))
        .await;
    refused.refused(422, "duplicate_keys");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("data rows 2 and 3, 1 and 4"), "{message}");
    let jsonl = "{\"company\": \"Acme\"}\n{\"company\": \"Acme\\t\"}\n";
    app.scan_file("firms.jsonl", jsonl.as_bytes().to_vec(), contact_config(3))
        .await
        .refused(422, "duplicate_keys");
    let mut book = rust_xlsxwriter::Workbook::new();
    let sheet = book.add_worksheet();
    for (row, company) in ["company", "Beta", "Acme", " Beta"].iter().enumerate() {
        sheet.write_string(row as u32, 0, *company).unwrap();
    }
    let xlsx = book.save_to_buffer().unwrap();
    let refused = app.scan_file("firms.xlsx", xlsx, contact_config(3)).await;
    refused.refused(422, "duplicate_keys");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("data rows 1 and 3"),
        "{}",
        refused.body
    );
    // Up to 20 pairs are named, and the rest counted.
    let many: String = (0..25).map(|i| format!("K{i}\nK{i}\n")).collect();
    let refused = app
        .scan_file(
            "keys.csv",
            format!("company\n{many}").into_bytes(),
            contact_config(3),
        )
        .await;
    refused.refused(422, "duplicate_keys");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("39 and 40")
            && !message.contains("41 and 42")
            && message.contains("and 5 more"),
        "{message}"
    );
    let details = &refused.body["error"]["details"];
    assert_eq!(details["pairs"].as_array().unwrap().len(), 20, "{details}");
    assert_eq!(details["pairs"][0], json!([1, 2]));
    assert_eq!(details["more"], 5);
    let listed = app.get("/v1/sessions", &app.admin).await.expect(200);
    assert_eq!(listed, json!([]), "a refused scan changes nothing");

    let mut allowing = contact_config(3);
    allowing["allow_duplicate_keys"] = json!(true);
    app.scan_file("firms.csv", csv.as_bytes().to_vec(), allowing)
        .await
        .expect(201);
}
