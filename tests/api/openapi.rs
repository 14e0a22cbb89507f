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

#[test]
fn a_tokens_cap_is_documented_as_creation_checks_it() {
    let doc = serde_json::to_value(quest::http::openapi()).unwrap();
    let schemas = &doc["components"]["schemas"];
    for schema in ["Token", "CreateTokenRequest"] {
        let cap = &schemas[schema]["properties"]["max_leases"];
        assert_eq!(
            (cap["minimum"].as_u64(), cap["maximum"].as_u64()),
            (Some(1), Some(1_000_000)),
            "{schema}.max_leases: {cap}"
        );
    }
    let refusal = &doc["paths"]["/v1/tokens"]["post"]["responses"]["422"]["description"];
    assert!(
        refusal
            .as_str()
            .is_some_and(|d| d.contains("invalid_max_leases")),
        "POST /v1/tokens documents its 422 invalid_max_leases: {refusal}"
    );
}
