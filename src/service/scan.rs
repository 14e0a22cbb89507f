//! Scanning a table into a session, with the checks of its verifiers.

use super::*;

/// The most repeats a `duplicate_keys` refusal names.
const REPEATS_NAMED: usize = 20;

/// 422 `duplicate_keys` when a key repeats: two quests of one name cannot be
/// told apart by the people and agents who read them.
fn refuse_repeated_keys(column: &str, keys: &[String]) -> Result<(), ServiceError> {
    let pairs = table::repeated_keys(keys);
    if pairs.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = pairs
        .iter()
        .take(REPEATS_NAMED)
        .map(|(a, b)| format!("{a} and {b}"))
        .collect();
    let more = match pairs.len().saturating_sub(REPEATS_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let message = format!(
        "the key column `{column}` repeats a key in data rows {}{more} (1-based, whitespace around a key \
         ignored): make each key unique, pick another column as config.key_column, or set \
         config.allow_duplicate_keys to true",
        named.join(", ")
    );
    let shown: Vec<[usize; 2]> = pairs
        .iter()
        .take(REPEATS_NAMED)
        .map(|&(a, b)| [a, b])
        .collect();
    Err(ServiceError::Invalid {
        code: "duplicate_keys",
        message,
        details: Some(serde_json::json!({
            "pairs": shown,
            "more": pairs.len().saturating_sub(REPEATS_NAMED),
        })),
    })
}

impl Service {
    /// Creates a session from a table, all or nothing.
    pub async fn create_session(
        &self,
        created_by: &str,
        config: Value,
        upload: Upload,
    ) -> Result<Session, ServiceError> {
        let mut config = SessionConfig::parse(config)?;
        let gate = self.checker.registry().build(&config.gate)?;
        if let Some(verify) = &mut config.verify {
            self.check_verifiers(verify, gate.as_ref())?;
        }
        prompt::check_template(&config.prompt.instructions)
            .map_err(|e| invalid("invalid_config", e.to_string()))?;
        let sheet = config.sheet.clone();
        let Upload { name, bytes } = upload;
        let format = Format::from_file_name(&name).ok_or_else(|| {
            invalid(
                "unsupported_file",
                format!("`{name}` is not a .csv, .tsv, .xlsx, .jsonl or .txt file"),
            )
        })?;
        let (table, source) = tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + SCAN_TIME_LIMIT;
            let options = table::ScanOptions {
                sheet: sheet.as_deref(),
                limits: &table::Limits::default(),
                out_of_time: &move || std::time::Instant::now() >= deadline,
            };
            table::parse(format, &bytes, &options).map(|t| (t, bytes))
        })
        .await
        .map_err(|e| ServiceError::Fault(format!("the table reader failed: {e}")))??;
        let (mut table, mut source, mut source_name, mut format) = (table, source, name, format);
        // Gold rows of the upload leave the table and its stored source.
        let mut gold_rows = Vec::new();
        if config.gold.is_some()
            && let Some(rows) = table::gold::take_gold(&mut table)?
        {
            (source, source_name, format) = table::gold::source_of(format, &source_name, &table);
            gold_rows = rows;
        }
        let key_column = config
            .key_column
            .clone()
            .unwrap_or_else(|| table.columns[0].clone());
        let keys = table.keys(&key_column)?;
        if !config.allow_duplicate_keys {
            refuse_repeated_keys(&key_column, &keys)?;
        }
        if let Some(missing) = gate
            .input_columns()
            .into_iter()
            .find(|c| !table.columns.contains(c))
        {
            return Err(invalid(
                "invalid_config",
                format!(
                    "config.gate names the column `{missing}`, which the table does not have; its columns are: {}",
                    table.columns.join(", ")
                ),
            ));
        }
        let gold = (!gold_rows.is_empty())
            .then(|| self.scanned_gold(&table.columns, &key_column, gold_rows))
            .transpose()?;
        let Table { columns, rows, .. } = table;
        let name = config.name.clone().unwrap_or_else(|| source_name.clone());
        // The draws of an overlap rate are keyed by a secret of the server's.
        let review_key = match config.review.as_ref().and_then(|r| r.overlap_rate) {
            Some(_) => Some(self.review_key().await?),
            None => None,
        };
        let session = NewSession {
            id: SessionId::new(),
            name,
            key_column,
            config,
            columns,
            source_name,
            source_type: format.media_type().to_owned(),
            source,
            created_by: created_by.to_owned(),
            rows: keys.into_iter().zip(rows).collect(),
            review_key,
        };
        let row = self.store.create_session(session).await?;
        if let Some(items) = gold {
            self.store.add_gold(row.id, items).await?;
        }
        let status = self.store.session_status(row.id).await?;
        Ok(Session::new(row, &status))
    }

    /// The gold items of an upload's gold rows, checked as added ones are
    /// (their expected results compared exactly, field by field).
    fn scanned_gold(
        &self,
        columns: &[String],
        key_column: &str,
        rows: Vec<table::gold::GoldRow>,
    ) -> Result<Vec<crate::store::NewGoldItem>, ServiceError> {
        if rows.len() > crate::domain::gold::MAX_ITEMS {
            return Err(invalid(
                "too_many_gold_items",
                format!(
                    "the upload has {} gold rows; a session holds at most {}",
                    rows.len(),
                    crate::domain::gold::MAX_ITEMS
                ),
            ));
        }
        let items = (rows.into_iter())
            .map(|r| api::GoldItem {
                kind: crate::domain::gold::GoldKind::Gold,
                input: r.input,
                expected: r.expected,
                compare: Map::new(),
            })
            .collect();
        super::gold::check_items(columns, key_column, items)
    }

    /// Checks a session's verifiers against this server and fills in the gate's
    /// default questions, so that the stored config says exactly what is asked.
    fn check_verifiers(
        &self,
        verify: &mut VerifyConfig,
        gate: &dyn Gate,
    ) -> Result<(), ConfigError> {
        let refuse = |field, message: String| Err(ConfigError { field, message });
        let known = self.verifiers.names();
        for (i, name) in verify.verifiers.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                let declared = if known.is_empty() {
                    "this server declares no verifiers (the operator adds [verifiers.NAME] to its --config file)".to_owned()
                } else {
                    format!("this server declares: {}", known.join(", "))
                };
                return refuse(
                    "config.verify.verifiers",
                    format!("[{i}]: unknown verifier `{name}`; {declared}"),
                );
            }
        }
        if gate.declared_fields().is_empty() {
            return refuse(
                "config.verify",
                format!(
                    "the `{}` gate as configured declares no result fields, and verifiers see only declared fields; \
                     declare them (for `schema`: list the fields under the schema's `properties`)",
                    gate.name()
                ),
            );
        }
        if verify.questions.is_empty() {
            verify.questions = gate.default_questions();
            if verify.questions.is_empty() {
                return refuse(
                    "config.verify.questions",
                    format!(
                        "the `{}` gate has no default questions; ask at least one",
                        gate.name()
                    ),
                );
            }
        }
        Ok(())
    }
}
