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
//!
//! Each run gets a scratch directory of its own, removed afterwards: the
//! program's working directory unless the spec names one, and the home of the
//! verdict file when the spec asks for one (`QUEST_VERDICT_FILE`, a channel the
//! program's stdout, which it may share with code it runs, cannot reach).
//! Resource limits and another user come from [`limits`].

pub mod limits;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

pub use limits::{Limits, RunAs};

/// The variable that names the verdict file.
pub const VERDICT_FILE_VAR: &str = "QUEST_VERDICT_FILE";

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
    /// Past this, the process group is killed.
    pub timeout: Duration,
    /// Resource limits (set by the `quest` binary as a trampoline).
    pub limits: Limits,
    /// Another user to run as (the server must run as root).
    pub user: Option<RunAs>,
    /// Give the program a verdict file to write (its path in
    /// `QUEST_VERDICT_FILE`) and read it back.
    pub verdict_file: bool,
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
            .field("verdict_file", &self.verdict_file)
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
    /// When the spec asked for one: the verdict file's first [`MAX_STDOUT`]
    /// bytes, or why there are none (not written, not a plain file, too long).
    pub verdict_file: Option<Result<Vec<u8>, String>>,
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
#[derive(Debug, Default, Clone)]
pub struct SystemProcessRunner {
    /// The `quest` binary, which sets resource limits as a trampoline; without
    /// it, a spec with limits cannot run.
    trampoline: Option<PathBuf>,
}

impl SystemProcessRunner {
    /// A runner whose resource limits are set by the `quest` binary at `trampoline`.
    pub fn new(trampoline: Option<PathBuf>) -> SystemProcessRunner {
        SystemProcessRunner { trampoline }
    }

    /// The command to spawn for `spec`: the program itself, or the trampoline
    /// in front of it when limits are set.
    fn command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, String> {
        if spec.limits.is_empty() {
            let mut command = tokio::process::Command::new(&spec.argv[0]);
            command.args(&spec.argv[1..]);
            return Ok(command);
        }
        let trampoline = self.trampoline.as_ref().ok_or(
            "resource limits need the quest binary as a trampoline, and this server has none",
        )?;
        let mut command = tokio::process::Command::new(trampoline);
        command.args(spec.limits.trampoline_args()).args(&spec.argv);
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

    fn verdict_path(&self) -> PathBuf {
        self.dir.path().join("verdict.json")
    }
}

/// Reads the verdict file the program wrote: a plain file (a symbolic link is
/// not followed: the server may be root, the program is not), at most `cap` bytes.
fn read_verdict_file(path: &Path, cap: usize) -> Result<Vec<u8>, String> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err("no verdict file was written".into()),
        Err(rustix::io::Errno::LOOP) => {
            return Err("the verdict file is a symbolic link, which is not read".into());
        }
        Err(e) => return Err(format!("the verdict file cannot be opened: {e}")),
    };
    let file = std::fs::File::from(fd);
    let is_file = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err("the verdict file is not a plain file".into());
    }
    let mut kept = Vec::new();
    file.take(cap as u64 + 1)
        .read_to_end(&mut kept)
        .map_err(|e| format!("the verdict file cannot be read: {e}"))?;
    if kept.len() > cap {
        return Err(format!("the verdict file is longer than {cap} bytes"));
    }
    Ok(kept)
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
        if spec.verdict_file {
            command.env(VERDICT_FILE_VAR, scratch.verdict_path());
        }
        if let Some(user) = &spec.user {
            command.uid(user.uid).gid(user.gid);
        }
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
        let stderr_tail = err.map_err(|e| ProcessError::Io(e.to_string()))?;
        if !spec.limits.is_empty() && status.code() == Some(limits::TRAMPOLINE_FAILED) {
            let stderr = String::from_utf8_lossy(&stderr_tail);
            if let Some(why) = stderr.trim().strip_prefix(limits::TRAMPOLINE_MARK) {
                return Err(spawn_error(why.to_owned()));
            }
        }
        let verdict_file = spec
            .verdict_file
            .then(|| read_verdict_file(&scratch.verdict_path(), MAX_STDOUT));
        Ok(ProcessOutput {
            code: status.code(),
            signal: std::os::unix::process::ExitStatusExt::signal(&status),
            stdout,
            stdout_cut,
            stderr_tail,
            verdict_file,
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

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout: Duration::from_secs(20),
            ..ProcessSpec::default()
        }
    }

    async fn run(spec: &ProcessSpec) -> ProcessOutput {
        SystemProcessRunner::default()
            .run(spec, Vec::new())
            .await
            .expect("the program runs")
    }

    #[tokio::test]
    async fn without_a_workdir_each_run_gets_a_fresh_empty_directory_removed_afterwards() {
        let spec = sh("pwd; ls -A | wc -l; touch left-behind");
        let first = run(&spec).await;
        let second = run(&spec).await;
        let lines = |out: &ProcessOutput| {
            String::from_utf8(out.stdout.clone())
                .unwrap()
                .lines()
                .map(|l| l.trim().to_owned())
                .collect::<Vec<_>>()
        };
        let (a, b) = (lines(&first), lines(&second));
        assert_ne!(a[0], b[0], "a directory of its own for each run");
        assert_eq!(
            (a[1].as_str(), b[1].as_str()),
            ("0", "0"),
            "empty at the start"
        );
        assert!(
            !Path::new(&a[0]).exists(),
            "{} is removed after the run",
            a[0]
        );
        let here = std::fs::canonicalize(".").unwrap();
        assert_ne!(Path::new(&a[0]), here, "not the server's own directory");
    }

    #[tokio::test]
    async fn the_verdict_file_is_read_only_when_it_is_a_plain_file_the_program_wrote() {
        let mut spec = sh(r#"printf '{"verdict": "FAIL"}' > "$QUEST_VERDICT_FILE""#);
        spec.verdict_file = true;
        assert_eq!(
            run(&spec).await.verdict_file,
            Some(Ok(br#"{"verdict": "FAIL"}"#.to_vec()))
        );
        for (script, says) in [
            ("echo no file", "no verdict file was written"),
            (
                r#"ln -s /etc/passwd "$QUEST_VERDICT_FILE""#,
                "symbolic link",
            ),
            (r#"mkdir "$QUEST_VERDICT_FILE""#, "not a plain file"),
            (r#"mkfifo "$QUEST_VERDICT_FILE""#, "not a plain file"),
            (
                r#"head -c 1048577 /dev/zero > "$QUEST_VERDICT_FILE""#,
                "longer than 1048576 bytes",
            ),
        ] {
            let mut spec = sh(script);
            spec.verdict_file = true;
            match run(&spec).await.verdict_file {
                Some(Err(why)) => assert!(why.contains(says), "{script}: {why}"),
                other => panic!("{script}: {other:?}"),
            }
        }
        assert_eq!(
            run(&sh("echo $QUEST_VERDICT_FILE")).await.stdout,
            b"\n",
            "offered only when asked"
        );
    }

    #[tokio::test]
    async fn limits_without_the_quest_binary_cannot_run() {
        let mut spec = sh("true");
        spec.limits.cpu_seconds = Some(1);
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
            verdict_file: None,
        };
        assert_eq!(out.stderr_text(9), "…last line");
        assert_eq!(out.stderr_text(100), "first line\nlast line");
    }
}
