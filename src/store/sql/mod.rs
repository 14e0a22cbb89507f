//! The store's code that both engines run the same way, written once and
//! compiled into each engine's module tree (`#[path = "../sql/mod.rs"]` in
//! `store/sqlite` and `store/postgres`). Its modules see, through the
//! imports below, what their engine supplies under the same names: the
//! write transaction `Tx`, the `codec` (its `Pool`, `Conn` and binds), the
//! `native` reads written in the engine's own dialect and the `leases`
//! module's `save`; and the engine's SQL fragments as macros (its
//! `dialect`). See `store/mod.rs` for the whole arrangement.

use super::{Tx, codec, leases, native};

pub mod calibration;
pub mod console;
pub mod gold;
pub mod held;
pub mod inputs;
pub mod pause_rule;
pub mod quality;
pub mod reads;
pub mod rechecks;
pub mod review;
pub mod secrets;
pub mod tokens;
pub mod verify;
