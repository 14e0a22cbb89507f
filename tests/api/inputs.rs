//! Hostile uploads: each bomb, sent to the real binary running under
//! `ulimit -v`, gets 422 naming the limit while the server keeps serving;
//! and the uploaded file comes back in stored pieces.

use std::io::{Cursor, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::*;

/// The address space the capped server gets: several times what it needs to
/// serve (about 400 MiB idle), far less than any bomb asks for.
const ADDRESS_SPACE_KIB: u64 = 3 * 1024 * 1024;

/// The real binary under `ulimit -v`; killed on drop.
struct CappedServer {
    child: Child,
    base: String,
    client: reqwest::Client,
    _dir: TempDir,
}

const ADMIN: &str = "capped-admin";

impl CappedServer {
    async fn start() -> CappedServer {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v "$1" && exec "$2" serve --bind "$3" --data-dir "$4""#)
            .arg("sh")
            .arg(ADDRESS_SPACE_KIB.to_string())
            .arg(env!("CARGO_BIN_EXE_quest"))
            .arg(format!("127.0.0.1:{port}"))
            .arg(dir.path())
            .env("QUEST_ADMIN_TOKEN", ADMIN)
            .env("QUEST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts the quest binary");
        let mut server = CappedServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
            _dir: dir,
        };
        for _ in 0..500 {
            if server.serves().await {
                return server;
            }
            assert!(server.alive(), "the capped server exited at start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the capped server did not become ready");
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    async fn serves(&self) -> bool {
        self.client
            .get(format!("{}/healthz", self.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    }

    /// A multipart scan of `bytes` named `name`: the status and the body.
    async fn scan_file(&self, name: &str, bytes: Vec<u8>) -> Option<(u16, Value)> {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()),
            )
            .text(
                "config",
                json!({"gate": {"kind": "schema", "schema": {"type": "object"}}}).to_string(),
            );
        let response = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .bearer_auth(ADMIN)
            .multipart(form)
            .send()
            .await
            .ok()?;
        Some((response.status().as_u16(), response.json().await.ok()?))
    }
}

impl Drop for CappedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workbook with `company` in A1 and `Acme` in A2, with some parts replaced.
fn workbook_with(parts: &[(&str, String)]) -> Vec<u8> {
    let mut book = rust_xlsxwriter::Workbook::new();
    let sheet = book.add_worksheet();
    sheet.write_string(0, 0, "company").unwrap();
    sheet.write_string(1, 0, "Acme").unwrap();
    let plain = book.save_to_buffer().unwrap();
    let mut zip = zip::ZipArchive::new(Cursor::new(plain)).unwrap();
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..zip.len() {
        let mut part = zip.by_index(i).unwrap();
        let name = part.name().unwrap().into_owned();
        let mut bytes = Vec::new();
        part.read_to_end(&mut bytes).unwrap();
        if let Some((_, xml)) = parts.iter().find(|(n, _)| *n == name) {
            bytes = xml.as_bytes().to_vec();
        }
        out.start_file(name, stored).unwrap();
        out.write_all(&bytes).unwrap();
    }
    out.finish().unwrap().into_inner()
}

fn strings_declaring(count: u64) -> (&'static str, String) {
    (
        "xl/sharedStrings.xml",
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="2" uniqueCount="{count}"><si><t>company</t></si><si><t>Acme</t></si></sst>"#
        ),
    )
}

fn sheet_with(dimension: &str, cells: &str) -> (&'static str, String) {
    (
        "xl/worksheets/sheet1.xml",
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{dimension}<sheetData>{cells}</sheetData></worksheet>"#
        ),
    )
}

const OUTERMOST: &str = r#"<row r="1"><c r="A1" t="inlineStr"><is><t>company</t></is></c></row><row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row>"#;

/// `(what, file name, bytes, code, words the message must hold)`.
fn bombs() -> Vec<(
    &'static str,
    &'static str,
    Vec<u8>,
    &'static str,
    &'static str,
)> {
    let wide_header = (0..1001)
        .map(|i| format!("c{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let wide_object: serde_json::Map<String, Value> =
        (0..1001).map(|i| (format!("k{i}"), json!(i))).collect();
    vec![
        (
            "a shared-string table declaring 10^11 strings",
            "sst.xlsx",
            workbook_with(&[strings_declaring(100_000_000_000)]),
            "table_limit",
            "at most 5000000 are read",
        ),
        (
            "a shared-string table declaring 2*10^8 strings (only the address-space cap makes this one fatal)",
            "sst-mid.xlsx",
            workbook_with(&[strings_declaring(200_000_000)]),
            "table_limit",
            "shared-string table",
        ),
        (
            "cells at A1 and XFD1048576 with their dimension declared",
            "dense.xlsx",
            workbook_with(&[sheet_with(r#"<dimension ref="A1:XFD1048576"/>"#, OUTERMOST)]),
            "table_limit",
            "at most 1000 columns",
        ),
        (
            "cells at A1 and XFD1048576 without a dimension",
            "sparse.xlsx",
            workbook_with(&[sheet_with("", OUTERMOST)]),
            "invalid_table",
            "column XFD",
        ),
        (
            "a header row from A1 to XFD1",
            "wide.xlsx",
            workbook_with(&[sheet_with(
                "",
                r#"<row r="1"><c r="A1" t="inlineStr"><is><t>company</t></is></c><c r="XFD1" t="inlineStr"><is><t>x</t></is></c></row>"#,
            )]),
            "table_limit",
            "at most 1000 columns",
        ),
        (
            "a CSV header of 1001 columns",
            "wide.csv",
            format!("{wide_header}\n{}\n", vec!["x"; 1001].join(",")).into_bytes(),
            "table_limit",
            "at most 1000 columns",
        ),
        (
            "a CSV header of a million empty names",
            "commas.csv",
            (",".repeat(1_000_000) + "\nx\n").into_bytes(),
            "table_limit",
            "at most 1000 columns",
        ),
        (
            "a CSV of 1,000,001 data rows",
            "long.csv",
            ("key\n".to_owned() + &"x\n".repeat(1_000_001)).into_bytes(),
            "table_limit",
            "more than 1000000 data rows",
        ),
        (
            "a JSONL object of 1001 keys",
            "wide.jsonl",
            format!("{}\n", Value::Object(wide_object)).into_bytes(),
            "table_limit",
            "at most 1000 columns",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spreadsheet_bomb_gets_422_naming_the_limit_while_a_memory_capped_server_keeps_serving()
 {
    let mut server = CappedServer::start().await;
    for (what, name, bytes, code, words) in bombs() {
        let answer = server.scan_file(name, bytes).await;
        assert!(
            server.alive(),
            "{what}: the server under `ulimit -v {ADDRESS_SPACE_KIB}` died"
        );
        let (status, body) = answer.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(status, 422, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {message}");
        assert!(server.serves().await, "{what}: the server stopped serving");
    }
    let wide = (0..1001)
        .map(|i| (format!("k{i}"), json!(1)))
        .collect::<serde_json::Map<_, _>>();
    let items = server
        .client
        .post(format!("{}/v1/sessions", server.base))
        .bearer_auth(ADMIN)
        .json(&json!({"config": {"gate": {"kind": "schema", "schema": {"type": "object"}}}, "items": [wide]}))
        .send()
        .await
        .unwrap();
    assert_eq!(items.status(), 422, "JSON items of 1001 columns");
    // Nothing was stored, and an honest table is still scanned.
    let (status, _) = server
        .scan_file("ok.csv", b"company\nAcme\n".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 201);
    let sessions: Value = server
        .client
        .get(format!("{}/v1/sessions", server.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
}

#[tokio::test]
async fn an_upload_is_stored_in_pieces_and_served_back_whole_with_its_length() {
    let app = spawn_app().await;
    // Three and a half pieces of 1 MiB, with a key on every line.
    let mut file = b"company,note\n".to_vec();
    let mut i = 0;
    while file.len() < quest::store::SOURCE_CHUNK * 7 / 2 {
        file.extend_from_slice(format!("c{i},{}\n", "n".repeat(100)).as_bytes());
        i += 1;
    }
    let mut config = contact_config(3);
    config["key_column"] = json!("company");
    let session = app
        .scan_file("big.csv", file.clone(), config)
        .await
        .expect(201);
    let id = session["id"].as_str().unwrap();
    let response = app
        .client
        .get(format!("{}/v1/sessions/{id}/source", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/csv");
    assert_eq!(
        response.content_length(),
        Some(file.len() as u64),
        "the length is known before the first piece is read"
    );
    assert!(response.bytes().await.unwrap() == file, "byte for byte");
}

#[tokio::test]
async fn the_store_keeps_an_upload_in_pieces_read_one_at_a_time() {
    use quest::store::{NewSession, SOURCE_CHUNK, SqliteStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        &dir.path().join("q.db"),
        std::sync::Arc::new(quest::domain::SystemClock),
        tokio::sync::broadcast::channel(8).0,
    )
    .await
    .unwrap();
    let source: Vec<u8> = (0..SOURCE_CHUNK * 3 + 10)
        .map(|i| (i % 251) as u8)
        .collect();
    let input = json!({"company": "Acme"}).as_object().unwrap().clone();
    let session = store
        .create_session(NewSession {
            review_key: None,
            id: quest::domain::ids::SessionId::new(),
            name: "s".into(),
            key_column: "company".into(),
            config: quest::domain::session::SessionConfig::parse(contact_config(3)).unwrap(),
            columns: vec!["company".into()],
            source_name: "s.bin.csv".into(),
            source_type: "text/csv".into(),
            source: source.clone(),
            created_by: "admin".into(),
            rows: vec![("Acme".into(), quest::domain::table::Row::from_map(&input))],
        })
        .await
        .unwrap();
    let info = store.source_info(session.id).await.unwrap();
    assert_eq!((info.size, info.pieces), (source.len() as u64, 4));
    let mut joined = Vec::new();
    for seq in 0..4 {
        let piece = store.source_chunk(session.id, seq).await.unwrap().unwrap();
        assert!(piece.len() <= SOURCE_CHUNK);
        joined.extend(piece);
    }
    assert!(joined == source, "the pieces make the file");
    assert_eq!(store.source_chunk(session.id, 4).await.unwrap(), None);
}
