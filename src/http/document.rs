//! The last touches of the OpenAPI document, so that it is valid OpenAPI 3.1
//! and a generated client reads every answer as what it is:
//!
//! - every response has the `description` 3.1 requires (the refusals get the
//!   meaning of their status; a success must describe itself in its
//!   `#[utoipa::path]`, which a test checks);
//! - a binary body (an export, an upload's bytes, a backup) is a string of
//!   `format: binary` with its `contentMediaType`, not an array of integers;
//! - an event stream is a string, with the schema of each event's data in
//!   `x-event-schema` (a per-event schema is OpenAPI 3.2's `itemSchema`);
//! - the answers of `next` are named components (`NextAssigned`, `NextWait`,
//!   `NextFinished`) told apart by their `status`;
//! - a session's gate is one of the gate kinds' configs (`SchemaGateConfig`,
//!   `EmailGateConfig`, `CommandGateConfig`) told apart by its `kind`;
//! - the JSON parts of a multipart body (the scan's `config`) say so in its
//!   `encoding`.
//!
//! Done on the document's JSON: utoipa's derive has no words for these.

use serde_json::{Map, Value, json};

/// The schema each event of a `text/event-stream` answer carries as its data.
const EVENT_SCHEMA: &str = "QuestEvent";

/// The named answers of `next`, by the `status` each one carries.
const NEXT_ANSWERS: [(&str, &str); 3] = [
    ("assigned", "NextAssigned"),
    ("wait", "NextWait"),
    ("finished", "NextFinished"),
];

/// The gate kinds and the component of each one's parameters.
const GATE_KINDS: [(&str, &str); 3] = [
    ("schema", "SchemaGateConfig"),
    ("email", "EmailGateConfig"),
    ("command", "CommandGateConfig"),
];

/// The parts of a multipart form that are JSON: (form component, part).
const JSON_PARTS: [(&str, &str); 1] = [("ScanForm", "config")];

/// Applies every touch to `doc`.
pub fn conform(doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let mut value = serde_json::to_value(&doc).expect("the document serialises");
    if let Some(paths) = value.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut().filter_map(Value::as_object_mut) {
            for operation in item.values_mut().filter_map(Value::as_object_mut) {
                conform_operation(operation);
            }
        }
    }
    if let Some(schemas) = value
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        name_next_answers(schemas);
        type_gates(schemas);
    }
    serde_json::from_value(value).expect("the touched document is still a document")
}

fn conform_operation(operation: &mut Map<String, Value>) {
    if let Some(body) = operation.get_mut("requestBody") {
        conform_content(body);
    }
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (status, response) in responses.iter_mut() {
        if let Some(response) = response.as_object_mut()
            && !response.contains_key("description")
            && let Some(meaning) = refusal_meaning(status)
        {
            response.insert("description".into(), meaning.into());
        }
        conform_content(response);
    }
}

/// What a refusal's status means, for a response that says no more.
fn refusal_meaning(status: &str) -> Option<&'static str> {
    Some(match status {
        "400" => {
            "The request is malformed (a path id, a header or a query parameter); the error says which"
        }
        "401" => "No valid bearer token: send `Authorization: Bearer <token>`",
        "403" => "The token may not do this (its role, or its sessions); the error says which",
        "404" => "No such session, quest, submission or token",
        "409" => {
            "The state forbids it now (a lease lost, a quest decided, a claim held); the error's code says which"
        }
        "413" => "The body is larger than this operation takes; the error names the limit",
        "415" => "The body's content type is not one this operation takes",
        "422" => "The body is not valid; the error names the field and what to send instead",
        "429" => "Too many requests: wait `Retry-After` seconds",
        "503" => "Unavailable now: ask again later",
        _ => return None,
    })
}

/// Binary bodies become strings of bytes, and event streams strings of events.
fn conform_content(holder: &mut Value) {
    let Some(content) = holder.get_mut("content").and_then(Value::as_object_mut) else {
        return;
    };
    for (media, entry) in content.iter_mut() {
        if media.starts_with("text/event-stream") {
            entry["schema"] = json!({
                "type": "string",
                "x-event-schema": {"$ref": format!("#/components/schemas/{EVENT_SCHEMA}")},
            });
            continue;
        }
        if media == "multipart/form-data" {
            let form = entry
                .pointer("/schema/$ref")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            for (_, part) in JSON_PARTS
                .iter()
                .filter(|(f, _)| form.ends_with(&format!("/{f}")))
            {
                entry["encoding"][*part] =
                    json!({"contentType": "application/json", "headers": {}});
            }
        }
        let Some(schema) = entry.get_mut("schema") else {
            continue;
        };
        if is_bytes(schema) {
            *schema = json!({
                "type": "string",
                "format": "binary",
                "contentMediaType": media,
            });
        }
    }
}

/// Whether `schema` is utoipa's rendering of `Vec<u8>`: an array of integers.
fn is_bytes(schema: &Value) -> bool {
    schema["type"] == "array" && schema["items"]["type"] == "integer"
}

/// Moves each inline answer of `NextResponse` into a component of its own
/// name and points the union at them, with `status` as the discriminator.
fn name_next_answers(schemas: &mut Map<String, Value>) {
    let Some(variants) = schemas
        .get_mut("NextResponse")
        .and_then(|s| s.get_mut("oneOf"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let mut named = Vec::new();
    let mut mapping = Map::new();
    for variant in variants.iter_mut() {
        let status = variant.pointer("/properties/status/enum/0").cloned();
        let Some(name) = NEXT_ANSWERS
            .iter()
            .find(|(s, _)| status.as_ref().and_then(Value::as_str) == Some(*s))
            .map(|(s, name)| (*s, *name))
        else {
            continue;
        };
        let reference = format!("#/components/schemas/{}", name.1);
        named.push((
            name.1,
            std::mem::replace(variant, json!({"$ref": reference})),
        ));
        mapping.insert(name.0.into(), reference.into());
    }
    if let Some(next) = schemas
        .get_mut("NextResponse")
        .and_then(Value::as_object_mut)
    {
        next.insert(
            "discriminator".into(),
            json!({"propertyName": "status", "mapping": mapping}),
        );
    }
    for (name, schema) in named {
        schemas.insert(name.into(), schema);
    }
}

/// Makes `GateConfig` the union of the gate kinds' configs, each with its
/// `kind` as a constant, and `kind` the discriminator.
fn type_gates(schemas: &mut Map<String, Value>) {
    let mut mapping = Map::new();
    let mut variants = Vec::new();
    for (kind, name) in GATE_KINDS {
        let Some(params) = schemas.get_mut(name).and_then(Value::as_object_mut) else {
            continue;
        };
        params
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|p| p.insert("kind".into(), json!({"type": "string", "enum": [kind]})));
        let required = params.entry("required").or_insert_with(|| json!([]));
        if let Some(required) = required.as_array_mut() {
            required.insert(0, json!("kind"));
        }
        let reference = format!("#/components/schemas/{name}");
        variants.push(json!({"$ref": reference}));
        mapping.insert(kind.into(), reference.into());
    }
    if let Some(gate) = schemas.get_mut("GateConfig") {
        let description = gate["description"].clone();
        *gate = json!({
            "description": description,
            "oneOf": variants,
            "discriminator": {"propertyName": "kind", "mapping": mapping},
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_become_a_binary_string_of_their_media_type_and_streams_a_string_of_events() {
        let mut response = json!({"content": {
            "text/csv": {"schema": {"type": "array", "items": {"type": "integer", "format": "int32"}}},
            "text/event-stream": {},
            "application/json": {"schema": {"type": "array", "items": {"type": "string"}}},
        }});
        conform_content(&mut response);
        assert_eq!(
            response["content"]["text/csv"]["schema"],
            json!({"type": "string", "format": "binary", "contentMediaType": "text/csv"})
        );
        assert_eq!(
            response["content"]["text/event-stream"]["schema"]["x-event-schema"],
            json!({"$ref": "#/components/schemas/QuestEvent"})
        );
        assert_eq!(
            response["content"]["application/json"]["schema"]["items"]["type"], "string",
            "a JSON array stays an array"
        );
    }

    #[test]
    fn the_answers_of_next_are_named_and_told_apart_by_status() {
        let variant = |status: &str| json!({"type": "object", "properties": {"status": {"type": "string", "enum": [status]}}});
        let mut schemas = json!({"NextResponse": {"oneOf": [variant("assigned"), variant("wait"), variant("finished")]}});
        name_next_answers(schemas.as_object_mut().unwrap());
        assert_eq!(
            schemas["NextResponse"]["oneOf"][1],
            json!({"$ref": "#/components/schemas/NextWait"})
        );
        assert_eq!(schemas["NextAssigned"], variant("assigned"));
        assert_eq!(
            schemas["NextResponse"]["discriminator"]["mapping"]["finished"],
            "#/components/schemas/NextFinished"
        );
    }

    #[test]
    fn the_gate_is_one_of_the_kinds_configs_told_apart_by_kind() {
        let doc = super::super::openapi();
        let schemas = serde_json::to_value(&doc).unwrap()["components"]["schemas"].clone();
        let gate = &schemas["GateConfig"];
        assert_eq!(gate["discriminator"]["propertyName"], "kind");
        for (kind, name) in GATE_KINDS {
            let reference = format!("#/components/schemas/{name}");
            assert_eq!(gate["discriminator"]["mapping"][kind], reference.as_str());
            assert!(
                gate["oneOf"]
                    .as_array()
                    .unwrap()
                    .contains(&json!({"$ref": reference}))
            );
            assert_eq!(
                schemas[name]["properties"]["kind"]["enum"],
                json!([kind]),
                "{name}"
            );
            assert_eq!(schemas[name]["required"][0], "kind", "{name}");
            assert_eq!(
                schemas[name]["additionalProperties"], false,
                "{name}: as strict as the gate"
            );
        }
        assert_eq!(
            schemas["SchemaGateConfig"]["properties"]["deny"]["items"]["$ref"],
            "#/components/schemas/GateRule"
        );
    }

    #[test]
    fn the_scans_config_part_is_a_json_session_config() {
        let doc = serde_json::to_value(super::super::openapi()).unwrap();
        let form =
            &doc["paths"]["/v1/sessions"]["post"]["requestBody"]["content"]["multipart/form-data"];
        assert_eq!(
            form["encoding"]["config"]["contentType"],
            "application/json"
        );
        assert_eq!(
            doc["components"]["schemas"]["ScanForm"]["properties"]["config"]["$ref"],
            "#/components/schemas/SessionConfig"
        );
    }
}
