//! The store's code that both engines run the same way, written once and
//! compiled into each engine's module tree (`#[path = "../sql/mod.rs"]` in
//! `store/sqlite` and `store/postgres`). Its modules see, through the
//! imports below, what their engine supplies under the same names: the
//! write transaction `Tx`, the `codec` (its `Pool`, `Conn` and binds), the
//! `native` reads written in the engine's own dialect and the `leases`
//! module's `save`; and the engine's SQL fragments as macros (its
//! `dialect`). See `store/mod.rs` for the whole arrangement.

use super::{Tx, codec, leases, native};

/// Whether token `$t` is paused in session `$s`: a live pause there, or a
/// live canary pause from any session (a canary pauses its token in every
/// session).
macro_rules! paused_in {
    ($s:literal, $t:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM token_pauses tp WHERE tp.token_id = ",
            $t,
            " AND tp.resumed_at IS NULL AND (tp.session_id = ",
            $s,
            " OR tp.reason = 'canary'))"
        )
    };
}

pub mod calibration;
pub mod canary;
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
