//! Running the operator's own programs (command gates and command verifiers)
//! behind one small trait, [`ProcessRunner`], so that tests can use a fake.
//!
//! The real runner never uses a shell: `argv` is executed as given, under the
//! `quest` binary's trampoline ([`trampoline`]), in its own process group, with
//! a cleared environment plus the allow-listed variables the configuration
//! resolved at start-up. Input goes to stdin; stdout is kept up to
//! [`MAX_STDOUT`] bytes (the rest is read and dropped, so the program is never
//! blocked on a full pipe) and the tail of stderr is kept for facts. The
//! trampoline kills the program at its timeout and, whenever it ends, every
//! process it left behind; the server kills the process group as well, and
//! the trampoline itself if it overstays.
//!
//! Each run gets a scratch directory of its own, removed afterwards: the
//! program's working directory unless the spec names one. When the spec asks
//! for it, the program gets a verdict channel: the write end of a pipe on
//! descriptor 3 (named in `QUEST_VERDICT_FD`), whose read end only the server
//! holds (close-on-exec), read while the program runs and judged after the
//! trampoline exited. Unlike a file, nothing the program runs can reach it
//! once the program closes it for them (`cargo test 3>&-`), and nothing can
//! write to it after the run. Resource limits and another user come from [`limits`].

pub mod limits;
pub mod trampoline;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

pub use limits::{Limits, RunAs};

/// The variable that names the verdict channel's descriptor.
pub const VERDICT_FD_VAR: &str = "QUEST_VERDICT_FD";
/// The descriptor the program writes its verdict to.
pub const VERDICT_FD: i32 = 3;
/// The most verdict channel bytes kept; past it the channel counts as cut.
pub const MAX_VERDICT: usize = 1024 * 1024;
/// How long the trampoline may take past the program's timeout to clean up
/// before the server kills it too.
const TRAMPOLINE_GRACE: Duration = Duration::from_secs(2);

/// The most stdout bytes kept; anything beyond is cut.
pub const MAX_STDOUT: usize = 1024 * 1024;
/// How many trailing stderr bytes are kept.
pub const STDERR_TAIL: usize = 8 * 1024;

/// A program to run, fully resolved (no environment is read when it runs).
/// Its `Debug` shows the names of the environment variables, never their values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The program and its arguments; never passed through a shell.
    pub argv: Vec<String>,
    /// The working directory; a fresh empty one for each run when unset.
    pub workdir: Option<PathBuf>,
    /// The child's whole environment.
    pub env: Vec<(String, String)>,
    /// Past this, the program and everything it started are killed.
    pub timeout: Duration,
    /// Resource limits (set by the `quest` binary as a trampoline).
    pub limits: Limits,
    /// Another user to run as (the server must run as root).
    pub user: Option<RunAs>,
    /// Give the program a verdict channel on descriptor 3 (named in
    /// `QUEST_VERDICT_FD`) and read it.
    pub verdict_fd: bool,
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
            .field("limits", &self.limits)
            .field("user", &self.user)
            .field("verdict_fd", &self.verdict_fd)
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
    /// What the program wrote to its verdict channel, when the spec asked for one.
    pub verdict: Option<Channel>,
}

/// What came through a verdict channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Channel {
    /// At most [`MAX_VERDICT`] bytes.
    pub bytes: Vec<u8>,
    /// True when more came, and was dropped.
    pub cut: bool,
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

/// The real runner: child processes of the server, each under the trampoline.
#[derive(Debug, Default, Clone)]
pub struct SystemProcessRunner {
    /// The `quest` binary, the trampoline every program runs under; without
    /// it, no program can run.
    trampoline: Option<PathBuf>,
}

impl SystemProcessRunner {
    /// A runner whose programs run under the `quest` binary at `trampoline`.
    pub fn new(trampoline: Option<PathBuf>) -> SystemProcessRunner {
        SystemProcessRunner { trampoline }
    }

    /// The command to spawn for `spec`: the trampoline in front of the program.
    fn command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, String> {
        let trampoline = self.trampoline.as_ref().ok_or(
            "operator programs run under the quest binary as a trampoline, and this server has none",
        )?;
        let mut command = tokio::process::Command::new(trampoline);
        command
            .arg(limits::SUBCOMMAND)
            .args(spec.limits.args())
            .arg("--timeout-ms")
            .arg(spec.timeout.as_millis().max(1).to_string())
            .arg("--")
            .args(&spec.argv);
        Ok(command)
    }
}

/// A run's scratch directory (mode 0700, owned by the program's user), removed on drop.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(user: Option<&RunAs>) -> std::io::Result<Scratch> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("quest-run-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        std::fs::create_dir(dir.path().join("work"))?;
        if let Some(user) = user {
            for path in [dir.path().to_owned(), dir.path().join("work")] {
                std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid))?;
            }
        }
        Ok(Scratch { dir })
    }

    fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }
}

/// Gives `command` the write end of a fresh pipe on descriptor 3 and returns
/// the read end, which stays in the server (close-on-exec).
fn verdict_channel(
    command: &mut tokio::process::Command,
) -> std::io::Result<tokio::net::unix::pipe::Receiver> {
    use command_fds::{CommandFdExt, FdMapping};
    let (reader, writer) = std::io::pipe()?;
    command
        .fd_mappings(vec![FdMapping {
            parent_fd: writer.into(),
            child_fd: VERDICT_FD,
        }])
        .map_err(std::io::Error::other)?
        .env(VERDICT_FD_VAR, VERDICT_FD.to_string());
    tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
}

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
        let scratch = Scratch::new(spec.user.as_ref())
            .map_err(|e| spawn_error(format!("cannot make its scratch directory: {e}")))?;
        let mut command = self.command(spec).map_err(spawn_error)?;
        command
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .current_dir(spec.workdir.clone().unwrap_or_else(|| scratch.workdir()))
            .process_group(0);
        let verdict = match spec.verdict_fd {
            true => Some(
                verdict_channel(&mut command)
                    .map_err(|e| spawn_error(format!("cannot make its verdict channel: {e}")))?,
            ),
            false => None,
        };
        if let Some(user) = &spec.user {
            command.uid(user.uid).gid(user.gid);
        }
        let started = Instant::now();
        let spawned = command.spawn();
        // The command holds the server's copy of the channel's write end:
        // dropped now, so that the read ends when the program's copies are gone.
        drop(command);
        let mut child = spawned.map_err(|e| spawn_error(e.to_string()))?;
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
            // The trampoline exits only after everything the program started
            // is gone; the group kill is a second lock (its group id cannot be
            // taken by a new process while any member lives; once none does,
            // the kill finds nothing).
            let status = child.wait().await;
            group.kill();
            status
        };
        let work = async {
            let (_, out, err, channel, status) = tokio::join!(
                write,
                read_capped(output, MAX_STDOUT),
                read_tail(errors, STDERR_TAIL),
                read_capped(verdict, MAX_VERDICT),
                exited
            );
            (out, err, channel, status)
        };
        let Ok((out, err, channel, status)) =
            tokio::time::timeout(spec.timeout + TRAMPOLINE_GRACE, work).await
        else {
            drop(group); // kills the group
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(ProcessError::TimedOut(spec.timeout));
        };
        group.0 = None; // killed when the program exited
        let status = status.map_err(|e| ProcessError::Io(e.to_string()))?;
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        // The trampoline kills the program at its timeout: a run that long,
        // ended by a signal, is that timeout (the server's own clock says so,
        // not anything the program printed).
        if signal.is_some() && started.elapsed() >= spec.timeout {
            return Err(ProcessError::TimedOut(spec.timeout));
        }
        let (stdout, stdout_cut) = out.map_err(|e| ProcessError::Io(e.to_string()))?;
        let stderr_tail = err.map_err(|e| ProcessError::Io(e.to_string()))?;
        if status.code() == Some(limits::TRAMPOLINE_FAILED) {
            let stderr = String::from_utf8_lossy(&stderr_tail);
            if let Some(why) = stderr.trim().strip_prefix(limits::TRAMPOLINE_MARK) {
                return Err(spawn_error(why.to_owned()));
            }
        }
        let verdict = match spec.verdict_fd {
            true => {
                let (bytes, cut) = channel.map_err(|e| ProcessError::Io(e.to_string()))?;
                Some(Channel { bytes, cut })
            }
            false => None,
        };
        Ok(ProcessOutput {
            code: status.code(),
            signal,
            stdout,
            stdout_cut,
            stderr_tail,
            verdict,
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
    async fn without_the_quest_binary_no_program_runs() {
        let spec = ProcessSpec {
            argv: vec!["/bin/true".into()],
            timeout: Duration::from_secs(5),
            ..ProcessSpec::default()
        };
        let err = SystemProcessRunner::default()
            .run(&spec, Vec::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ProcessError::Spawn { .. }), "{err:?}");
        assert!(err.to_string().contains("trampoline"), "{err}");
    }

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
            env: vec![("JUDGE_TOKEN".into(), "tok-s3cret".into())],
            timeout: Duration::from_secs(1),
            ..ProcessSpec::default()
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
            verdict: None,
        };
        assert_eq!(out.stderr_text(9), "…last line");
        assert_eq!(out.stderr_text(100), "first line\nlast line");
    }
}
