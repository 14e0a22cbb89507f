//! What an operator program may use: resource limits and the user it runs as.
//!
//! Limits are set by a trampoline, because setting them between `fork` and
//! `exec` needs `unsafe` (`pre_exec`), which this crate forbids: the runner
//! starts the `quest` binary itself as `quest __run-limited --cpu-seconds N
//! ... -- PROGRAM ARGS`, which lowers its own limits ([`run_limited`]) and
//! then replaces itself with the program, which inherits them. The user is set
//! by the standard library (`CommandExt::uid`/`gid`, which also drops the
//! supplementary groups), before the trampoline runs.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use rustix::process::{Resource, Rlimit, setrlimit};

/// The exit status of a trampoline that could not start the program.
pub const TRAMPOLINE_FAILED: i32 = 127;
/// How the trampoline's own failure starts on stderr, so that it is told
/// apart from a program that happens to exit 127.
pub const TRAMPOLINE_MARK: &str = "quest __run-limited: ";
/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__run-limited";

/// Resource limits set on a program before it starts (soft and hard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// CPU time: SIGXCPU at this many seconds, SIGKILL one second later.
    pub cpu_seconds: Option<u64>,
    /// Address space (virtual memory), in bytes: allocations past it fail.
    pub address_space: Option<u64>,
    /// Open file descriptors: opening one more fails.
    pub open_files: Option<u64>,
}

impl Limits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The trampoline's arguments up to and including `--`.
    pub fn trampoline_args(&self) -> Vec<String> {
        let mut args = vec![SUBCOMMAND.to_owned()];
        for (flag, value) in [
            ("--cpu-seconds", self.cpu_seconds),
            ("--address-space", self.address_space),
            ("--open-files", self.open_files),
        ] {
            if let Some(value) = value {
                args.push(flag.to_owned());
                args.push(value.to_string());
            }
        }
        args.push("--".to_owned());
        args
    }
}

/// Another user an operator program runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// `quest __run-limited`: sets resource limits on itself, then becomes the program.
#[derive(Debug, clap::Args)]
pub struct LimitedRun {
    #[arg(long)]
    pub cpu_seconds: Option<u64>,
    #[arg(long)]
    pub address_space: Option<u64>,
    #[arg(long)]
    pub open_files: Option<u64>,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub argv: Vec<OsString>,
}

/// Lowers this process's limits and replaces it with the program; returns
/// only when that failed, with the message to print (after [`TRAMPOLINE_MARK`]).
pub fn run_limited(run: LimitedRun) -> String {
    let cpu = run.cpu_seconds.map(|s| (s, s.saturating_add(1)));
    for (resource, limit) in [
        (Resource::Cpu, cpu),
        (Resource::As, run.address_space.map(|b| (b, b))),
        (Resource::Nofile, run.open_files.map(|n| (n, n))),
    ] {
        let Some((soft, hard)) = limit else { continue };
        let limit = Rlimit {
            current: Some(soft),
            maximum: Some(hard),
        };
        if let Err(e) = setrlimit(resource, limit) {
            return format!("cannot set the {resource:?} limit to {soft}: {e}");
        }
    }
    let (program, args) = run.argv.split_first().expect("clap requires one");
    // Only returns on failure; the environment and the working directory are
    // the ones the runner gave the trampoline.
    let error = std::process::Command::new(program).args(args).exec();
    format!("cannot start `{}`: {error}", program.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_gets_only_the_limits_that_are_set() {
        assert!(Limits::default().is_empty());
        let limits = Limits {
            cpu_seconds: Some(2),
            open_files: Some(64),
            ..Limits::default()
        };
        assert!(!limits.is_empty());
        assert_eq!(
            limits.trampoline_args(),
            [SUBCOMMAND, "--cpu-seconds", "2", "--open-files", "64", "--"]
        );
    }
}
