//! The committed OpenAPI document must match what the server serves.

#[test]
fn the_committed_openapi_document_is_current() {
    let generated = quest::http::openapi().to_pretty_json().unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: regenerate it with `UPDATE_OPENAPI=1 cargo test --test api openapi` \
         (or `quest openapi > openapi/openapi.json`) and commit it"
    );
}

#[test]
fn every_operation_has_an_id_and_lists_its_refusals() {
    let doc = serde_json::to_value(quest::http::openapi()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_default();
            assert!(!id.is_empty(), "{method} {path} has no operationId");
            if path.starts_with("/v1/") {
                assert!(
                    op["responses"].get("401").is_some(),
                    "{id} does not list 401"
                );
            }
        }
    }
}
