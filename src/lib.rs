//! `quest`: an HTTP/JSON service that takes the word "done" away from AI agents.
//!
//! The map, inside out:
//! - [`domain`]: pure rules: quest states and their one transition function, facts, receipts, prompts, tables.
//! - [`gates`]: the deterministic checkers, behind the [`gates::Gate`] trait and a registry.
//! - [`store`]: durable state behind the [`store::Store`] trait; all SQL lives there.
//! - [`workers`]: the gate runner and the lease sweeper.
//! - [`service`]: the use cases the HTTP API exposes.
//! - [`export`]: CSV, JSONL and XLSX exports.
//! - [`api`]: wire types shared by the server and the OpenAPI document.
//! - [`http`]: router, extractors, the error body; thin handlers.
//! - [`config`] and [`app`]: one configuration, and the wiring that runs it.
//! - [`testing`]: fakes of the outside world and a local DNS server, for tests only.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod export;
pub mod gates;
pub mod http;
pub mod service;
pub mod store;
pub mod testing;
pub mod workers;
