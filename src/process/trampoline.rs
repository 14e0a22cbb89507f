//! The trampoline every operator program runs under: `quest __run-limited`.
//!
//! The server starts the `quest` binary itself in front of the program. Being
//! a fresh single-threaded process, it can do what the server cannot without
//! racing tokio's own reaping of children: it marks itself a *child
//! subreaper* (`PR_SET_CHILD_SUBREAPER`), so that whatever the program leaves
//! behind, even a process that called `setsid` to leave its group, is
//! re-parented to it instead of to init. It starts the program (through a
//! second `quest __run-limited --exec` that sets the resource limits, when
//! there are any), waits for it (killing it at its timeout), then kills every
//! remaining descendant, walking its children until `wait` reports none, and
//! only then exits, with the program's status. The server reads the verdict
//! only after the trampoline has exited, so nothing the program started can
//! still write to it.
//!
//! Its own failures are printed on stderr after [`TRAMPOLINE_MARK`] with exit
//! status [`TRAMPOLINE_FAILED`].

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions, getpid, kill_process};

use super::limits::{LimitedRun, SUBCOMMAND, exec_limited};
#[cfg(doc)]
use super::limits::{TRAMPOLINE_FAILED, TRAMPOLINE_MARK};

/// How the trampoline ends: the program's exit status, or its own failure.
pub fn run(run: LimitedRun) -> Result<i32, String> {
    if run.exec {
        return Err(exec_limited(run.limits(), &run.argv));
    }
    rustix::process::set_child_subreaper(Some(getpid()))
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    // The list of children must be readable: without it nothing could be
    // cleaned up, so the program does not start.
    std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("cannot read its children from /proc: {e}"))?;
    let (program, args) = run.argv.split_first().ok_or("no program to run")?;
    let limits = run.limits();
    let mut command = if limits.is_empty() {
        let mut command = Command::new(program);
        command.args(args);
        command
    } else {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the quest binary to set limits: {e}"))?;
        let mut command = Command::new(exe);
        command
            .args([SUBCOMMAND, "--exec"])
            .args(limits.args())
            .arg("--")
            .args(&run.argv);
        command
    };
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", program.to_string_lossy()))?;
    let deadline = run
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let status = wait_until(&mut child, deadline).map_err(|e| format!("cannot wait: {e}"))?;
    kill_the_rest();
    Ok(exit_code(status))
}

/// Waits for the program, killing it at `deadline`.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Option<Instant>,
) -> std::io::Result<ExitStatus> {
    let Some(deadline) = deadline else {
        return child.wait();
    };
    // Polling, because a blocking wait cannot time out without a signal
    // handler; the pause grows so that a long run costs nothing.
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            child.kill()?;
            return child.wait();
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Kills every process re-parented to this one, level by level (killing one
/// re-parents its own children here), and reaps them, until none is left.
fn kill_the_rest() {
    loop {
        for pid in listed() {
            // ESRCH: it ended in between, and is reaped below.
            let _ = kill_process(pid, Signal::KILL);
        }
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(_) | Err(Errno::INTR) => continue,
            // ECHILD: nothing left, which is the way out.
            Err(_) => return,
        }
    }
}

/// The pids `/proc/self/task/*/children` list now.
fn listed() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .filter_map(Pid::from_raw)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The program's status as this process's: its exit code, or, for a program a
/// signal ended, the same signal on itself (so that the server sees a signal,
/// not a code an agent could print), else 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return code;
    }
    let signal = status.signal().unwrap_or(0);
    if let Some(sig) = Signal::from_named_raw(signal) {
        // No core file of the trampoline in the program's directory.
        let none = rustix::process::Rlimit {
            current: Some(0),
            maximum: Some(0),
        };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Core, none);
        let _ = kill_process(getpid(), sig);
    }
    128 + signal
}
