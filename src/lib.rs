//! `quest`: an HTTP/JSON service that takes the word "done" away from AI agents.
//!
//! The map, inside out:
//! - [`domain`]: pure rules: quest states and their one transition function, facts, receipts, prompts, tables.
//! - [`gates`]: the deterministic checkers, behind the [`gates::Gate`] trait and a registry
//!   (built-in gates and the operator's `command` gates), and the one [`gates::Checker`]
//!   that runs a check for the service, the gate runner and the re-checker.
//! - [`verifiers`]: the AI verifier backends (L2) behind the [`verifiers::Verifier`] trait.
//! - [`process`]: running operator programs (no shell, cleared environment, timeouts, caps).
//! - [`store`]: durable state behind the [`store::Store`] trait; all SQL lives there.
//! - [`workers`]: background work: the gate runner and the re-checker (queues of checks), the L2 verifier runner, the lease sweeper.
//! - [`service`]: the use cases the HTTP API exposes.
//! - [`export`]: CSV, JSONL and XLSX exports: declared columns, neutralised cells, bounded slots.
//! - [`api`]: wire types shared by the server and the OpenAPI document.
//! - [`http`]: router, extractors, the error body; thin handlers.
//! - [`cli`]: the client verbs of the binary (the agent loop and operator verbs).
//! - [`config`] and [`app`]: one configuration (flags, env, the operator's file), and the wiring that runs it.
//! - [`testing`]: fakes of the outside world and a hand-moved clock, for tests and `quest demo`'s simulation.

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod export;
pub mod gates;
pub mod http;
pub mod process;
pub mod service;
pub mod store;
pub mod testing;
pub mod verifiers;
pub mod workers;
