//! Running the operator's own programs (command gates and command verifiers)
//! behind one small trait, [`ProcessRunner`], so that tests can use a fake.
//!
//! The real runner never uses a shell: `argv` is executed as given, in its own
//! process group, with a cleared environment plus the allow-listed variables
//! the configuration resolved at start-up. Input goes to stdin; stdout is kept
//! up to [`MAX_STDOUT`] bytes (the rest is read and dropped, so the program is
//! never blocked on a full pipe) and the tail of stderr is kept for facts. Past
//! its timeout the whole process group is killed; so it is as soon as the
//! program exits, so that nothing it started in the background outlives it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The most stdout bytes kept; anything beyond is cut.
pub const MAX_STDOUT: usize = 1024 * 1024;
/// How many trailing stderr bytes are kept.
pub const STDERR_TAIL: usize = 8 * 1024;

/// A program to run, fully resolved (no environment is read when it runs).
/// Its `Debug` shows the names of the environment variables, never their values.
#[derive(Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The program and its arguments; never passed through a shell.
    pub argv: Vec<String>,
    /// The working directory; the server's own when unset.
    pub workdir: Option<PathBuf>,
    /// The child's whole environment.
    pub env: Vec<(String, String)>,
    /// Past this, the process group is killed.
    pub timeout: Duration,
}

impl std::fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(name, _)| format!("{name}=<redacted>"))
            .collect();
        f.debug_struct("ProcessSpec")
            .field("argv", &self.argv)
            .field("workdir", &self.workdir)
            .field("env", &env)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What a program did before it exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// At most [`MAX_STDOUT`] bytes.
    pub stdout: Vec<u8>,
    /// True when stdout was longer than [`MAX_STDOUT`] and was cut.
    pub stdout_cut: bool,
    /// The last [`STDERR_TAIL`] bytes of stderr.
    pub stderr_tail: Vec<u8>,
}

impl ProcessOutput {
    /// How the program ended: `exit status 3`, `ended by signal 9 (SIGKILL)`.
    pub fn status_text(&self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("ended by signal {signal} ({})", signal_name(signal)),
            (None, None) => "ended without an exit status".to_owned(),
        }
    }

    /// The tail of stderr as text, at most `max` characters.
    pub fn stderr_text(&self, max: usize) -> String {
        let text = String::from_utf8_lossy(&self.stderr_tail);
        let text = text.trim();
        let count = text.chars().count();
        if count <= max {
            return text.to_owned();
        }
        let tail: String = text.chars().skip(count - max).collect();
        format!("…{tail}")
    }
}

/// Why a program gave no output to read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// It could not be started.
    #[error("cannot start `{program}`: {message}")]
    Spawn { program: String, message: String },
    /// It ran past its timeout and was killed.
    #[error("killed after {} ms", .0.as_millis())]
    TimedOut(Duration),
    /// Reading its output failed.
    #[error("i/o error while running it: {0}")]
    Io(String),
}

/// Runs programs.
#[async_trait]
pub trait ProcessRunner: Send + Sync {
    /// Runs `spec` with `stdin` as its standard input and waits for it to exit.
    async fn run(&self, spec: &ProcessSpec, stdin: Vec<u8>) -> Result<ProcessOutput, ProcessError>;
}

/// The real runner: child processes of the server.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProcessRunner;

/// The conventional name of a signal number.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => "another signal",
    }
}

/// A program's process group, killed with SIGKILL by [`GroupKill::kill`] and
/// on drop: whatever way the run ends (exit, timeout, abandonment), nothing the
/// program started outlives it.
struct GroupKill(Option<u32>);

impl GroupKill {
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(pgid) = self
            .0
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        {
            // ESRCH (already gone) is the normal case and not an error.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

#[async_trait]
impl ProcessRunner for SystemProcessRunner {
    async fn run(&self, spec: &ProcessSpec, stdin: Vec<u8>) -> Result<ProcessOutput, ProcessError> {
        let program = spec.argv.first().cloned().unwrap_or_default();
        let spawn_error = |message: String| ProcessError::Spawn {
            program: program.clone(),
            message,
        };
        if program.is_empty() {
            return Err(spawn_error("argv is empty".into()));
        }
        let mut command = tokio::process::Command::new(&program);
        command
            .args(&spec.argv[1..])
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &spec.workdir {
            command.current_dir(dir);
        }
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
        let mut group = GroupKill(child.id());
        let (input, output, errors) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let write = async move {
            if let Some(mut pipe) = input {
                // A program that does not read its input is not an error.
                let _ = pipe.write_all(&stdin).await;
                let _ = pipe.shutdown().await;
            }
        };
        let exited = async {
            let status = child.wait().await;
            // The program is done: what it left running in the background goes
            // too (and lets go of the pipes, so the reads below can end).
            // Its group id cannot be taken by a new process while any member
            // lives; once none does, the kill finds nothing (ESRCH).
            group.kill();
            status
        };
        let work = async {
            let (_, out, err, status) = tokio::join!(
                write,
                read_capped(output, MAX_STDOUT),
                read_tail(errors, STDERR_TAIL),
                exited
            );
            (out, err, status)
        };
        let Ok((out, err, status)) = tokio::time::timeout(spec.timeout, work).await else {
            drop(group); // kills the group
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(ProcessError::TimedOut(spec.timeout));
        };
        group.0 = None; // killed when the program exited
        let status = status.map_err(|e| ProcessError::Io(e.to_string()))?;
        let (stdout, stdout_cut) = out.map_err(|e| ProcessError::Io(e.to_string()))?;
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        Ok(ProcessOutput {
            code: status.code(),
            signal,
            stdout,
            stdout_cut,
            stderr_tail: err.map_err(|e| ProcessError::Io(e.to_string()))?,
        })
    }
}

/// Reads to the end, keeping the first `cap` bytes; says whether more came.
async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let Some(mut pipe) = pipe else {
        return Ok((Vec::new(), false));
    };
    let (mut kept, mut cut) = (Vec::new(), false);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, cut));
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        cut |= n > room;
    }
}

/// Reads to the end, keeping the last `keep` bytes.
async fn read_tail(pipe: Option<impl AsyncRead + Unpin>, keep: usize) -> std::io::Result<Vec<u8>> {
    let Some(mut pipe) = pipe else {
        return Ok(Vec::new());
    };
    let mut tail = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            return Ok(tail);
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn capped_reads_keep_the_head_of_stdout_and_the_tail_of_stderr() {
        let data = [b'x'; 100];
        let (kept, cut) = read_capped(Some(&data[..]), 10).await.unwrap();
        assert_eq!((kept.len(), cut), (10, true));
        let (kept, cut) = read_capped(Some(&data[..]), 100).await.unwrap();
        assert_eq!((kept.len(), cut), (100, false));
        let tail = read_tail(Some(&b"0123456789"[..]), 4).await.unwrap();
        assert_eq!(tail, b"6789");
    }

    #[test]
    fn debug_output_names_the_environment_but_never_its_values() {
        let spec = ProcessSpec {
            argv: vec!["/bin/judge".into()],
            workdir: None,
            env: vec![("JUDGE_TOKEN".into(), "tok-s3cret".into())],
            timeout: Duration::from_secs(1),
        };
        let shown = format!("{spec:?}");
        assert!(shown.contains("JUDGE_TOKEN=<redacted>"), "{shown}");
        assert!(!shown.contains("tok-s3cret"), "{shown}");
    }

    #[test]
    fn the_stderr_text_is_its_tail() {
        let out = ProcessOutput {
            code: Some(1),
            signal: None,
            stdout: vec![],
            stdout_cut: false,
            stderr_tail: b"  first line\nlast line\n".to_vec(),
        };
        assert_eq!(out.stderr_text(9), "…last line");
        assert_eq!(out.stderr_text(100), "first line\nlast line");
    }
}
