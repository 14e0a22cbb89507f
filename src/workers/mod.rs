//! Background work: the gate runner (decides PENDING submissions) and the lease
//! sweeper. Each exposes one idempotent step that tests drive directly; a thin
//! loop around it runs until shutdown.

pub mod gate_runner;
pub mod sweeper;

pub use gate_runner::GateRunner;
