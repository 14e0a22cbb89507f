//! One black-box test binary: a real server on a random port, a fresh data dir per test.

mod auth;
mod bad_input;
mod cli;
mod cli_text;
mod command_gate;
mod concurrency;
mod contract;
mod exports;
mod fake_llm;
mod guard;
mod helpers;
mod injection;
mod inputs;
mod lease_cap;
mod lifecycle;
mod mcp;
mod openapi;
mod operations;
mod postgres;
mod ratchet;
mod restart;
mod revocation;
mod schemathesis;
mod sessions;
mod store;
mod verifiers;
