//! Exports against hostile agents and heavy use: declared columns only,
//! neutralised formulas, bounded concurrency, work that stops with its client,
//! and agents that keep cycling while large exports run.

use calamine::Reader;
use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use crate::helpers::*;

fn xlsx_rows(bytes: Vec<u8>) -> Vec<Vec<calamine::Data>> {
    let mut book = calamine::Xlsx::new(std::io::Cursor::new(bytes)).expect("a readable workbook");
    let range = book.worksheet_range_at(0).unwrap().unwrap();
    range.rows().map(<[calamine::Data]>::to_vec).collect()
}

fn text(cell: &calamine::Data) -> String {
    cell.to_string()
}

const FORMULA_EMAIL: &str = "=HYPERLINK(\"http://evil.test\",\"x\")@beta.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_widen_break_or_poison_the_export() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let items = json!([
        {"company": "Acme", "city": "=1+1"},
        {"company": "Beta", "city": "-2+3"}
    ]);
    // The widest result a session may accept, so that the export is what stops it.
    let mut config = contact_config(3);
    config["max_result_bytes"] = json!(1024 * 1024);
    let session = app.scan(config, items).await;
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    let mut junk = Map::new();
    junk.insert("email".into(), json!("info@acme.test"));
    junk.insert("confidence".into(), json!("high"));
    for i in 0..20_000 {
        junk.insert(format!("junk{i}"), json!(i));
    }
    let answer = app
        .submit(&agent, &q, &l, Value::Object(junk))
        .await
        .expect(200);
    assert_eq!(answer["verdict"], "PASS", "{answer}");
    let acme = q;
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    let answer = app
        .submit(
            &agent,
            &q,
            &l,
            json!({"email": FORMULA_EMAIL, "confidence": "high"}),
        )
        .await
        .expect(200);
    assert_eq!(answer["verdict"], "PASS", "{answer}");

    let header = [
        "company",
        "city",
        "quest_state",
        "quest_decided_by",
        "quest_tries",
        "result_email",
        "result_confidence",
        "result_extra",
        "quest_facts",
        "quest_evidence",
        "quest_receipt",
        "quest_stale",
        "quest_rechecked_at",
        "quest_recheck_facts",
        "quest_suspect",
        "quest_audit",
    ];
    let (status, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=xlsx"))
        .await;
    assert_eq!(status, 200, "20,000 junk keys do not break the workbook");
    let rows = xlsx_rows(bytes);
    assert_eq!(rows[0].iter().map(text).collect::<Vec<_>>(), header);
    let extra = text(&rows[1][7]);
    assert!(
        extra.len() <= quest::export::RESULT_EXTRA_MAX,
        "capped: {} bytes",
        extra.len()
    );
    let extra: Map<String, Value> = serde_json::from_str(&extra).unwrap();
    assert_eq!(extra["junk0"], 0, "the first undeclared keys are kept");
    assert!(
        extra.contains_key("…"),
        "and the cell says that more were left out"
    );
    assert_eq!(
        text(&rows[1][1]),
        "'=1+1",
        "an uploaded formula is neutralised"
    );
    assert_eq!(text(&rows[2][1]), "'-2+3");
    assert_eq!(
        rows[1][4],
        calamine::Data::Float(0.0),
        "quest_tries (FAILs before the PASS) is a number a spreadsheet can sum, not text"
    );
    assert_eq!(
        text(&rows[2][5]),
        format!("'{FORMULA_EMAIL}"),
        "so is an agent's"
    );

    let (_, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    assert_eq!(reader.headers().unwrap().iter().collect::<Vec<_>>(), header);
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(&records[0][1], "'=1+1");
    assert_eq!(&records[1][5], format!("'{FORMULA_EMAIL}"));
    assert!(records[0][7].contains("\"junk0\":0"));

    let (_, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=jsonl"))
        .await;
    let lines: Vec<Value> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[1]["result_email"], FORMULA_EMAIL,
        "JSONL carries values as they are"
    );
    assert_eq!(lines[0]["city"], "=1+1");
    assert_eq!(lines[0].as_object().unwrap().len(), header.len());
    // The submission record keeps everything the agent sent.
    let quest = app.quest(&acme).await;
    let result = &quest["submissions"][0]["result"];
    assert_eq!(
        result.as_object().unwrap().len(),
        20_002,
        "{}",
        quest["submissions"][0]["id"]
    );
}

/// The value of `quest_exports_cancelled_total{format="<format>"}` in `/metrics`.
async fn cancelled(app: &TestApp, format: &str) -> u64 {
    let text = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("quest_exports_cancelled_total{{format=\"{format}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_an_export_gets_503_and_an_export_whose_client_goes_away_stops() {
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| c.max_exports = 1).await;
    let big = app.scan(contact_config(3), companies(30_000)).await;
    let tiny = app.scan(contact_config(3), companies(1)).await;
    let before = cancelled(&app, "xlsx").await;
    let (client, url, admin) = (
        app.client.clone(),
        format!("{}/v1/sessions/{big}/export?format=xlsx", app.base),
        app.admin.clone(),
    );
    // Asks again while a tiny export below holds the slot for a moment.
    let building = tokio::spawn(async move {
        loop {
            let response = client.get(&url).bearer_auth(&admin).send().await;
            if response
                .as_ref()
                .is_ok_and(|r| r.status() == StatusCode::SERVICE_UNAVAILABLE)
            {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
            break response;
        }
    });
    // The big workbook holds the only slot once the tiny export is refused.
    let refused = loop {
        let response = app
            .client
            .get(format!("{}/v1/sessions/{tiny}/export?format=csv", app.base))
            .bearer_auth(&app.admin)
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            break response;
        }
        assert_eq!(response.status(), 200);
        assert!(
            !building.is_finished(),
            "the big workbook was done before it could be seen busy"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "exports_busy", "{body}");
    // The client goes away: the workbook is abandoned and its slot comes back.
    building.abort();
    for attempt in 0.. {
        let (status, _) = app
            .bytes(&format!("/v1/sessions/{tiny}/export?format=csv"))
            .await;
        if status == 200 {
            break;
        }
        assert!(attempt < 3000, "the slot never came back");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        cancelled(&app, "xlsx").await > before,
        "the slot came back because the work stopped, not because it finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_large_exports_run_while_agents_keep_cycling() {
    const QUESTS: usize = 4_000;
    const AGENTS: usize = 4;
    const CYCLES: usize = 40;
    let app = std::sync::Arc::new(spawn_app().await);
    let session = app.scan(contact_config(3), companies(QUESTS)).await;
    let token = app.token("agent", "bots").await;
    let mut exports = Vec::new();
    // One viewer each: a token runs two exports at most.
    for (i, format) in ["xlsx", "csv", "jsonl", "xlsx"].into_iter().enumerate() {
        let (app, session) = (app.clone(), session.clone());
        let viewer = app.token("viewer", &format!("viewer-{i}")).await;
        exports.push(tokio::spawn(async move {
            let response = app
                .client
                .get(format!(
                    "{}/v1/sessions/{session}/export?format={format}",
                    app.base
                ))
                .bearer_auth(viewer)
                .send()
                .await
                .unwrap();
            let status = response.status();
            (format, status, response.bytes().await.unwrap().to_vec())
        }));
    }
    let mut agents = Vec::new();
    for agent in 0..AGENTS {
        let (app, session, token) = (app.clone(), session.clone(), token.clone());
        agents.push(tokio::spawn(async move {
            let name = format!("a{agent}");
            for i in 0..CYCLES {
                let (q, l) = assigned(&app.next(&token, &session, &name).await);
                let email = format!("{name}-{i}@x.test");
                let answer = app.submit(&token, &q, &l, json!({"email": email})).await;
                assert_eq!(answer.expect(200)["verdict"], "PASS");
            }
        }));
    }
    for agent in agents {
        agent.await.expect("every agent finished its cycles");
    }
    for export in exports {
        let (format, status, bytes) = export.await.unwrap();
        assert_eq!(status, 200, "{format}");
        let rows = match format {
            "xlsx" => xlsx_rows(bytes).len() - 1,
            "csv" => csv::Reader::from_reader(bytes.as_slice()).records().count(),
            _ => bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count(),
        };
        assert_eq!(rows, QUESTS, "{format}: every row");
    }
    let status = app.status(&session).await;
    assert_sums(&status);
    assert_eq!(status["pass"], AGENTS * CYCLES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reading_slowly_holds_two_exports_at_most_and_loses_them_when_it_stops_reading() {
    let app = spawn_app_tuned(tempfile::tempdir().unwrap(), None, |c| {
        c.max_exports = 3;
        c.export_idle_seconds = 1;
    })
    .await;
    // About 20 MB of CSV: far more than the sockets between the two ends buffer.
    let padding = "x".repeat(2_000);
    let items: Vec<Value> = (0..10_000)
        .map(|i| json!({"company": format!("Company {i:05}"), "notes": padding}))
        .collect();
    let big = app.scan(contact_config(3), Value::Array(items)).await;
    let viewer = app.token("viewer", "slow-reader").await;
    let url = format!("{}/v1/sessions/{big}/export?format=csv", app.base);
    let open = |token: String| {
        let (client, url) = (app.client.clone(), url.clone());
        async move { client.get(&url).bearer_auth(token).send().await.unwrap() }
    };

    // Two exports whose bodies the viewer does not read; a third is refused.
    let stalled = [open(viewer.clone()).await, open(viewer.clone()).await];
    for response in &stalled {
        assert_eq!(response.status(), 200);
    }
    let refused = open(viewer.clone()).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "token_exports_busy", "{body}");

    // Everyone else still exports, the admin included.
    let (status, bytes) = app
        .bytes(&format!("/v1/sessions/{big}/export?format=csv"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        csv::Reader::from_reader(bytes.as_slice()).records().count(),
        10_000
    );

    // Unread, the viewer's exports are ended and both their slots come back:
    // the viewer holds two new exports at once.
    let mut reopened = Vec::new();
    for attempt in 0.. {
        let response = open(viewer.clone()).await;
        if response.status() == 200 {
            reopened.push(response);
            if reopened.len() == 2 {
                break;
            }
            continue;
        }
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(attempt < 3000, "the unread exports kept their slots");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // An ended export is cut, never mistaken for a whole file.
    for response in stalled {
        assert!(
            response.bytes().await.is_err(),
            "an ended export ends in an error"
        );
    }
}

#[tokio::test]
async fn an_xlsx_writer_failure_is_a_500_that_does_not_echo_its_cause() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(2)).await;
    // The writer's temporary directory goes away under the running server.
    let exports = app.data_dir.path().join("exports");
    std::fs::remove_dir_all(&exports).unwrap();
    let failed = app
        .get(
            &format!("/v1/sessions/{session}/export?format=xlsx"),
            &app.admin,
        )
        .await;
    failed.refused(500, "internal");
    let message = failed.body["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("exports") && !message.contains("No such file"),
        "the cause is logged, not echoed: {message}"
    );
    std::fs::create_dir_all(&exports).unwrap();
    let (status, _) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=xlsx"))
        .await;
    assert_eq!(status, 200, "the slot of the failed export was given back");
}
