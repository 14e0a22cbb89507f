//! Background work, which runs the use cases of other modules and owns none:
//! the gate runner (PENDING submissions, checked by [`crate::gates::Checker`]),
//! the L2 verifier runner (asks the AI verifiers about L1 PASSes), the lease
//! sweeper, the re-checker (PASS quests against today's world, checked by the
//! same checker), the orphan scan (work of a replica that died) and the
//! held review decisions (recorded when their undo window ends); the gate
//! runner and the re-checker share one fair scheduler of the gate workers.
//! Each exposes one idempotent step that tests drive directly; a thin loop
//! around it runs until shutdown.

pub mod claims;
pub mod gate_runner;
pub mod held_reviews;
pub mod orphans;
pub mod rechecker;
pub mod retry;
pub mod scheduler;
pub mod sweeper;
pub mod verifier_runner;

pub use gate_runner::GateRunner;
pub use rechecker::Rechecker;
pub use verifier_runner::VerifierRunner;
