//! One black-box test binary: a real server on a random port, a fresh data dir per test.

mod auth;
mod bad_input;
mod cli;
mod command_gate;
mod concurrency;
mod contract;
mod fake_llm;
mod helpers;
mod lifecycle;
mod openapi;
mod operations;
mod ratchet;
mod restart;
mod sessions;
mod store;
mod verifiers;
