//! What an operator program may use: resource limits and the user it runs as.
//!
//! Limits are set by the `quest` binary, because setting them between `fork`
//! and `exec` needs `unsafe` (`pre_exec`), which this crate forbids: the
//! trampoline ([`super::trampoline`]) starts `quest __run-limited --exec
//! --cpu-seconds N ... -- PROGRAM ARGS`, which lowers its own limits
//! ([`exec_limited`]) and then replaces itself with the program, which
//! inherits them. The trampoline itself stays unlimited, so that a low
//! `open_files` or `address_space_mb` cannot stop it from cleaning up. The
//! user is set by the standard library (`CommandExt::uid`/`gid`, which also
//! drops the supplementary groups) when the server starts the trampoline.

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
    /// The largest file it may write, in bytes: past it, SIGXFSZ.
    pub file_size: Option<u64>,
    /// Processes and threads of its user (`RLIMIT_NPROC` counts all of that
    /// uid's, so it is only offered together with another user).
    pub processes: Option<u64>,
}

impl Limits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The limit flags the `quest` binary takes.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, value) in [
            ("--cpu-seconds", self.cpu_seconds),
            ("--address-space", self.address_space),
            ("--open-files", self.open_files),
            ("--file-size", self.file_size),
            ("--processes", self.processes),
        ] {
            if let Some(value) = value {
                args.push(flag.to_owned());
                args.push(value.to_string());
            }
        }
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

/// `quest __run-limited`: the trampoline every operator program runs under.
#[derive(Debug, clap::Args)]
pub struct LimitedRun {
    #[arg(long)]
    pub cpu_seconds: Option<u64>,
    #[arg(long)]
    pub address_space: Option<u64>,
    #[arg(long)]
    pub open_files: Option<u64>,
    #[arg(long)]
    pub file_size: Option<u64>,
    #[arg(long)]
    pub processes: Option<u64>,
    /// Past this, the program and everything it started are killed.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Set the limits and become the program (the trampoline's second step).
    #[arg(long)]
    pub exec: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub argv: Vec<OsString>,
}

impl LimitedRun {
    /// The limits the flags name.
    pub fn limits(&self) -> Limits {
        Limits {
            cpu_seconds: self.cpu_seconds,
            address_space: self.address_space,
            open_files: self.open_files,
            file_size: self.file_size,
            processes: self.processes,
        }
    }
}

/// Lowers this process's limits and replaces it with the program; returns
/// only when that failed, with the message to print (after [`TRAMPOLINE_MARK`]).
pub fn exec_limited(limits: Limits, argv: &[OsString]) -> String {
    let cpu = limits.cpu_seconds.map(|s| (s, s.saturating_add(1)));
    let same = |value: Option<u64>| value.map(|v| (v, v));
    for (resource, limit) in [
        (Resource::Cpu, cpu),
        (Resource::As, same(limits.address_space)),
        (Resource::Nofile, same(limits.open_files)),
        (Resource::Fsize, same(limits.file_size)),
        (Resource::Nproc, same(limits.processes)),
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
    let Some((program, args)) = argv.split_first() else {
        return "no program to run".into();
    };
    // Only returns on failure; the environment, the working directory and the
    // descriptors are the ones the trampoline was given.
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
            file_size: Some(1 << 20),
            ..Limits::default()
        };
        assert!(!limits.is_empty());
        assert_eq!(
            limits.args(),
            [
                "--cpu-seconds",
                "2",
                "--open-files",
                "64",
                "--file-size",
                "1048576"
            ]
        );
    }
}
