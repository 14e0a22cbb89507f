//! `quest backup FILE`: a consistent copy of the server's database, made by
//! the server while it keeps serving, saved here. The file appears whole or
//! not at all: it is written beside the target and renamed at the end.

use std::path::{Path, PathBuf};

use reqwest::Method;

use super::{CliError, Ctx};

/// `quest backup`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// Where to save the copy (an SQLite database file).
    pub output: PathBuf,
}

/// Saves the server's backup to `args.output`.
pub async fn run(ctx: &Ctx, args: BackupArgs) -> Result<u8, CliError> {
    let mut response = ctx.client.download_with(Method::POST, "/v1/backup").await?;
    let partial = args.output.with_extension("partial");
    let written = save(&mut response, &partial).await?;
    std::fs::rename(&partial, &args.output).map_err(|e| {
        CliError::Usage(format!("cannot move the backup to {}: {e}", args.output.display()))
    })?;
    eprintln!("quest: saved a backup of {written} bytes to {}", args.output.display());
    Ok(super::exit::OK)
}

/// Writes a streamed answer to `path`; the number of bytes written.
pub async fn save(response: &mut reqwest::Response, path: &Path) -> Result<u64, CliError> {
    let io = |e: std::io::Error| CliError::Usage(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::File::create(path).map_err(io)?;
    let mut written = 0u64;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CliError::Garbled(e.to_string()))?
    {
        std::io::Write::write_all(&mut file, &chunk).map_err(io)?;
        written += chunk.len() as u64;
    }
    file.sync_all().map_err(io)?;
    Ok(written)
}
