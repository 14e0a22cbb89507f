//! One black-box test binary: a real server on a random port, a fresh data dir per test.

mod auth;
mod backend_choice;
mod backlog;
mod bad_input;
mod calibration;
mod calibration_store;
mod canary;
mod cli;
mod cli_loop;
mod cli_text;
mod cli_traps;
mod cluster;
mod coalescing;
mod command_gate;
mod command_gate_channel;
mod concurrency;
mod connections;
#[expect(
    dead_code,
    reason = "the console tests' helpers; the API tests use some of them"
)]
#[path = "../ui/console.rs"]
mod console;
mod containment;
mod containment_console;
mod contract;
mod contract_claims;
mod contract_pending;
mod contract_rechecks;
mod contract_replicas;
mod exports;
mod fairness;
mod fake_llm;
mod gold;
mod gold_scores;
mod guard;
mod helpers;
mod idempotency;
mod injection;
mod inputs;
mod lease_cap;
mod leases;
mod lifecycle;
mod logs;
mod mcp;
mod mcp_python;
mod openapi;
mod operations;
mod postgres;
mod quality;
mod ratchet;
mod ratchet_fixture;
mod ratchet_rules;
mod recheck;
mod recheck_reasons;
mod replicas;
mod replicas_admin;
mod replicas_verifiers;
mod restart;
mod review_undo;
mod reviewers;
mod revocation;
mod schemathesis;
mod server;
mod sessions;
mod store;
mod store_faults;
mod text_limits;
mod verifiers;
mod verifiers_config;
mod verifiers_crash;
