//! The operator's verbs: `status` (with its bar and table), `scan`, `export`
//! and `token`.

use super::*;

/// A text progress bar of `width` cells: PASS `#`, REVIEW `?`, DONE `x`, remaining `.`.
pub fn bar(s: &Status, width: usize) -> String {
    let total = s.total.max(1) as f64;
    let cells = |n: u64| ((n as f64 / total) * width as f64).round() as usize;
    let (pass, review, done) = (cells(s.pass), cells(s.review), cells(s.done));
    // Rounding may overshoot by a cell: trim the largest part back to the width.
    let (mut pass, mut review, mut done) = (pass, review, done);
    while pass + review + done > width {
        let largest = if pass >= review && pass >= done {
            &mut pass
        } else if review >= done {
            &mut review
        } else {
            &mut done
        };
        *largest -= 1;
    }
    format!(
        "[{}{}{}{}]",
        "#".repeat(pass),
        "?".repeat(review),
        "x".repeat(done),
        ".".repeat(width - pass - review - done)
    )
}

/// `quest status`: every session, or the one `QUEST_SESSION` names.
pub(super) async fn status(ctx: &Ctx, args: StatusArgs) -> Result<u8, CliError> {
    // Clearing the screen is for a terminal; a pipe gets one table after another.
    let clear = args.watch && std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        let sessions: Vec<Session> = match ctx.given_session() {
            Some(id) => vec![ctx.client.get(&format!("/v1/sessions/{id}")).await?],
            None => ctx.client.get("/v1/sessions").await?,
        };
        if ctx.args.json {
            print_json(&sessions);
        } else {
            if clear {
                print!("\x1b[2J\x1b[H");
            }
            say!("{}", status_table(&sessions));
        }
        if !args.watch {
            return Ok(exit::OK);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The status table: one line per session.
pub fn status_table(sessions: &[Session]) -> String {
    let mut out = format!(
        "{:<24} {:<36} {:<32} {:>6} {:>6} {:>6} {:>6} {:>6}  {}\n",
        "SESSION",
        "ID",
        "PROGRESS (# pass ? review x done)",
        "TOTAL",
        "PASS",
        "REVIEW",
        "DONE",
        "LEFT",
        "RATE/ETA"
    );
    for s in sessions {
        let st = &s.status;
        let eta = st
            .eta_seconds
            .filter(|_| st.remaining > 0)
            .map_or_else(|| "-".to_owned(), |e| format!("{}m{:02}s", e / 60, e % 60));
        let name: String = s.name.chars().take(24).collect();
        out.push_str(&format!(
            "{name:<24} {:<36} {:<32} {:>6} {:>6} {:>6} {:>6} {:>6}  {:.1}/min, eta {eta}\n",
            s.id,
            bar(st, 30),
            st.total,
            st.pass,
            st.review,
            st.done,
            st.remaining,
            st.rate_per_minute
        ));
        if let Some(at) = st.rechecked_at.filter(|_| st.recheck.is_some()) {
            out.push_str(&format!(
                "{:<24} re-checked {}: {} stale, {} unconfirmed (they stay PASS)\n",
                "",
                at.format("%Y-%m-%d %H:%M UTC"),
                st.stale,
                st.unconfirmed
            ));
        } else if let Some(run) = st.recheck.as_ref().filter(|r| r.finished_at.is_none()) {
            out.push_str(&format!(
                "{:<24} re-checking: {}/{} done, {} stale, {} unconfirmed so far\n",
                "", run.done, run.total, st.stale, st.unconfirmed
            ));
        }
    }
    if sessions.is_empty() {
        out.push_str(
            "(no sessions yet: create one with `quest scan FILE --key COLUMN --gate KIND`)\n",
        );
    }
    out
}

pub(super) async fn scan(ctx: &Ctx, args: ScanArgs) -> Result<u8, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let mut config: Value = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
            Value::Object(parse_object(&text, &path.display().to_string())?)
        }
        None => Value::Object(Map::new()),
    };
    if let Some(key) = &args.key {
        config["key_column"] = Value::String(key.clone());
    }
    if let Some(name) = &args.name {
        config["name"] = Value::String(name.clone());
    }
    if let Some(sheet) = &args.sheet {
        config["sheet"] = Value::String(sheet.clone());
    }
    if let Some(kind) = &args.gate {
        if !config["gate"].is_object() {
            config["gate"] = Value::Object(Map::new());
        }
        config["gate"]["kind"] = Value::String(kind.clone());
    }
    if !config["gate"].is_object() {
        return Err(usage(
            "name a gate with --gate KIND (or a `gate` in --config)".into(),
        ));
    }
    let bytes = std::fs::read(&args.file)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.file.display())))?;
    let file_name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "upload".into());
    let total = bytes.len() as u64;
    let progress = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("uploading {bar:40} {bytes}/{total_bytes}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if total < 1024 * 1024 {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    // Slices of one buffer: the upload is not copied again to count its progress.
    let bytes = axum::body::Bytes::from(bytes);
    let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = (0..bytes.len())
        .step_by(64 * 1024)
        .map(|start| Ok(bytes.slice(start..(start + 64 * 1024).min(bytes.len()))))
        .collect();
    let counted = {
        let progress = progress.clone();
        futures_util::StreamExt::map(futures_util::stream::iter(chunks), move |chunk| {
            if let Ok(c) = &chunk {
                progress.inc(c.len() as u64);
            }
            chunk
        })
    };
    let part =
        reqwest::multipart::Part::stream_with_length(reqwest::Body::wrap_stream(counted), total)
            .file_name(file_name);
    let form = reqwest::multipart::Form::new()
        .part("file", part)
        .text("config", config.to_string());
    let session: Session = ctx.client.post_form("/v1/sessions", form).await?;
    progress.finish_and_clear();
    if ctx.args.json {
        print_json(&session);
    } else {
        say!(
            "Created session {} ({}): {} quests, key column `{}`, gate `{}`.\nAgents start with: QUEST_SESSION={} quest next",
            session.name,
            session.id,
            session.status.total,
            session.key_column,
            session.config.gate.kind,
            session.id
        );
    }
    Ok(exit::OK)
}

pub(super) async fn export(ctx: &Ctx, args: ExportArgs) -> Result<u8, CliError> {
    let ext = args
        .output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if !["csv", "jsonl", "xlsx"].contains(&ext.as_str()) {
        return Err(CliError::Usage(format!(
            "{}: name the output .csv, .jsonl or .xlsx to pick the format",
            args.output.display()
        )));
    }
    let session = ctx.session().await?;
    let mut response = ctx
        .client
        .download(&format!("/v1/sessions/{session}/export?format={ext}"))
        .await?;
    let written = backup::save(&mut response, &args.output).await?;
    eprintln!("quest: wrote {written} bytes to {}", args.output.display());
    let quality = super::quality::of(ctx, session).await?;
    eprintln!("quest: quality: {}", quality.summary);
    Ok(exit::OK)
}

pub(super) async fn token(ctx: &Ctx, verb: TokenVerb) -> Result<u8, CliError> {
    match verb {
        TokenVerb::Create {
            role,
            name,
            max_leases,
            sessions,
            adjudicate,
        } => {
            let request = CreateTokenRequest {
                name,
                role,
                max_leases,
                sessions: (!sessions.is_empty()).then_some(sessions),
                adjudicate,
            };
            let (_, created): (_, CreatedToken) = ctx.client.post("/v1/tokens", &request).await?;
            if ctx.args.json {
                print_json(&created);
            } else {
                text::say_err!(
                    "quest: token `{}` ({}) created; its secret is shown this once:",
                    created.token.name,
                    created.token.role
                );
                println!("{}", created.secret);
            }
        }
        TokenVerb::List => {
            let tokens: Vec<Token> = ctx.client.get("/v1/tokens").await?;
            if ctx.args.json {
                print_json(&tokens);
            } else {
                println!(
                    "{:<36} {:<9} {:<24} {:<10} STATE",
                    "ID", "ROLE", "NAME", "MAX LEASES"
                );
                for t in tokens {
                    let state = t
                        .revoked_at
                        .map_or_else(|| "active".to_owned(), |at| format!("revoked {at}"));
                    let cap = t
                        .max_leases
                        .map_or_else(|| "-".to_owned(), |n| n.to_string());
                    say!(
                        "{:<36} {:<9} {:<24} {cap:<10} {state}",
                        t.id,
                        t.role.as_str(),
                        t.name
                    );
                }
            }
        }
        TokenVerb::Revoke { id } => {
            let token: Token = ctx.client.delete(&format!("/v1/tokens/{id}")).await?;
            if ctx.args.json {
                print_json(&token);
            } else {
                say!("Revoked token `{}` ({}).", token.name, token.id);
            }
        }
    }
    Ok(exit::OK)
}

pub(super) async fn agent(ctx: &Ctx, verb: AgentVerb) -> Result<u8, CliError> {
    let session = ctx.session().await?;
    match verb {
        AgentVerb::Resume { token_id } => {
            let url = format!("/v1/sessions/{session}/tokens/{token_id}/resume");
            let (_, pause): (_, crate::api::Pause) =
                ctx.client.post(&url, &serde_json::json!({})).await?;
            if ctx.args.json {
                print_json(&pause);
            } else {
                text::say_err!(
                    "quest: token {} (agent {}) resumed in session {}",
                    pause.token_id,
                    pause.agent,
                    pause.session_id
                );
            }
        }
        AgentVerb::Pauses => {
            let pauses: Vec<crate::api::Pause> = ctx
                .client
                .get(&format!("/v1/sessions/{session}/pauses"))
                .await?;
            if ctx.args.json {
                print_json(&pauses);
            } else {
                for p in &pauses {
                    let state = match &p.resumed_by {
                        Some(by) => format!("resumed by {by}"),
                        None => "PAUSED".to_owned(),
                    };
                    println!(
                        "{}  {}  {}  {}  {}",
                        p.token_id, p.agent, p.reason, p.created_at, state
                    );
                }
            }
        }
    }
    Ok(exit::OK)
}
