//! Scans in every format, the source served back byte for byte, and exports.

use calamine::Reader;
use serde_json::{Value, json};

use crate::helpers::*;

fn file_config() -> Value {
    let mut config = contact_config(3);
    config.as_object_mut().unwrap().remove("name");
    config
}

#[tokio::test]
async fn a_semicolon_csv_is_scanned_and_its_bytes_are_served_back_exactly() {
    let app = spawn_app().await;
    let bytes = "company;city;note\nAcme;Seoul;\"a; b\"\nBeta;Busan;\n"
        .as_bytes()
        .to_vec();
    let session = app
        .scan_file("firms.csv", bytes.clone(), file_config())
        .await
        .expect(201);
    assert_eq!(session["columns"], json!(["company", "city", "note"]));
    assert_eq!(
        session["name"], "firms.csv",
        "the file name names the session by default"
    );
    assert_eq!(session["status"]["total"], 2);
    let id = session["id"].as_str().unwrap();
    let (status, source) = app.bytes(&format!("/v1/sessions/{id}/source")).await;
    assert_eq!(status, 200);
    assert_eq!(source, bytes);
}

#[tokio::test]
async fn tab_jsonl_text_and_xlsx_uploads_become_quests() {
    let app = spawn_app().await;
    let tsv = app
        .scan_file(
            "a.tsv",
            b"company\tcity\nAcme\tSeoul\n".to_vec(),
            file_config(),
        )
        .await
        .expect(201);
    assert_eq!(tsv["columns"], json!(["company", "city"]));

    let jsonl = app
        .scan_file(
            "a.jsonl",
            b"{\"company\": \"Acme\", \"size\": 3}\n".to_vec(),
            file_config(),
        )
        .await
        .expect(201);
    assert_eq!(jsonl["columns"], json!(["company", "size"]));

    let mut text_config = file_config();
    text_config["key_column"] = json!("item");
    let text = app
        .scan_file("a.txt", b"Acme\nBeta\n".to_vec(), text_config)
        .await
        .expect(201);
    assert_eq!(text["status"]["total"], 2);

    let mut book = rust_xlsxwriter::Workbook::new();
    book.add_worksheet()
        .set_name("ignored")
        .unwrap()
        .write_string(0, 0, "x")
        .unwrap();
    let sheet = book.add_worksheet().set_name("firms").unwrap();
    sheet.write_string(0, 0, "company").unwrap();
    sheet.write_string(0, 1, "staff").unwrap();
    sheet.write_string(1, 0, "Acme").unwrap();
    sheet.write_number(1, 1, 12.0).unwrap();
    let bytes = book.save_to_buffer().unwrap();
    let mut xlsx_config = file_config();
    xlsx_config["sheet"] = json!("firms");
    let xlsx = app
        .scan_file("firms.xlsx", bytes.clone(), xlsx_config)
        .await
        .expect(201);
    assert_eq!(xlsx["columns"], json!(["company", "staff"]));
    let id = xlsx["id"].as_str().unwrap();
    assert_eq!(
        app.bytes(&format!("/v1/sessions/{id}/source")).await.1,
        bytes
    );
    let agent = app.token("agent", "bot").await;
    let next = app.next(&agent, id, "a").await;
    assert_eq!(
        next["quest"]["input"],
        json!({"company": "Acme", "staff": 12})
    );
}

/// Runs one session to a mix of states: PASS, REVIEW, DONE and TODO.
async fn mixed_session(app: &TestApp) -> String {
    let agent = app.token("agent", "bot").await;
    let items = json!([
        {"company": "Acme", "city": "Seoul", "staff": 12},
        {"company": "Beta", "city": "Busan, Korea", "staff": 3},
        {"company": "Gamma", "city": "Incheon", "staff": 7},
        {"company": "Delta", "city": "Daegu", "staff": 1}
    ]);
    // `phone` is declared: only declared fields get a column of their own.
    let session = app
        .scan(declaring(contact_config(1), &["phone"]), items)
        .await;
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(
        &agent,
        &q,
        &l,
        json!({"email": "info@acme.test", "confidence": "high"}),
    )
    .await
    .expect(200);
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(
        &agent,
        &q,
        &l,
        json!({"email": "hi@beta.test", "confidence": "low", "phone": "010"}),
    )
    .await
    .expect(200);
    let (q, l) = assigned(&app.next(&agent, &session, "a").await);
    app.submit(&agent, &q, &l, json!({"email": "nope"}))
        .await
        .expect(200);
    session
}

#[tokio::test]
async fn the_csv_export_keeps_original_rows_and_adds_the_quest_columns() {
    let app = spawn_app().await;
    let session = mixed_session(&app).await;
    let (status, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    assert_eq!(status, 200);
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "company",
            "city",
            "staff",
            "quest_state",
            "quest_decided_by",
            "quest_tries",
            "result_email",
            "result_confidence",
            "result_phone",
            "quest_facts",
            "quest_evidence",
            "quest_receipt",
            "quest_stale",
            "quest_rechecked_at",
            "quest_recheck_facts",
            "quest_suspect",
            "quest_audit"
        ]
    );
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(
        &rows[0][..8],
        [
            "Acme",
            "Seoul",
            "12",
            "PASS",
            "gate",
            "0",
            "info@acme.test",
            "high"
        ]
    );
    assert!(rows[0][11].starts_with("sha256:"));
    assert_eq!(
        &rows[1][..3],
        ["Beta", "Busan, Korea", "3"],
        "original values, commas included"
    );
    assert_eq!(
        (rows[1][3].as_str(), rows[1][8].as_str()),
        ("REVIEW", "010")
    );
    assert_eq!(
        (
            rows[2][3].as_str(),
            rows[2][4].as_str(),
            rows[2][6].as_str()
        ),
        ("DONE", "limit", "")
    );
    assert!(
        rows[2][9].contains("/email"),
        "the last facts, compact: {}",
        rows[2][9]
    );
    assert_eq!(&rows[3][3..6], ["TODO", "", "0"]);
}

#[tokio::test]
async fn jsonl_and_xlsx_exports_carry_the_same_columns() {
    let app = spawn_app().await;
    let session = mixed_session(&app).await;
    let (_, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=jsonl"))
        .await;
    let lines: Vec<Value> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let keys: Vec<&str> = lines[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        &keys[..4],
        ["company", "city", "staff", "quest_state"],
        "original order first"
    );
    assert_eq!(lines[0]["staff"], 12, "original values keep their type");
    assert_eq!(lines[0]["result_email"], "info@acme.test");

    let (status, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=xlsx"))
        .await;
    assert_eq!(status, 200);
    let mut book = calamine::Xlsx::new(std::io::Cursor::new(bytes)).unwrap();
    let range = book.worksheet_range_at(0).unwrap().unwrap();
    let rows: Vec<Vec<String>> = range
        .rows()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0][..4], ["company", "city", "staff", "quest_state"]);
    assert_eq!(rows[1][..4], ["Acme", "Seoul", "12", "PASS"]);

    app.get(
        &format!("/v1/sessions/{session}/export?format=pdf"),
        &app.admin,
    )
    .await
    .refused(422, "invalid_format");
}

#[tokio::test]
async fn a_large_export_streams_every_row_in_order() {
    let app = spawn_app().await;
    let session = app.scan(contact_config(3), companies(1234)).await;
    let (_, bytes) = app
        .bytes(&format!("/v1/sessions/{session}/export?format=csv"))
        .await;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let keys: Vec<String> = reader.records().map(|r| r.unwrap()[0].to_owned()).collect();
    assert_eq!(keys.len(), 1234, "every page is streamed");
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "rows keep upload order"
    );
}
