//! Fakes for tests: a clock that only moves when told to.

use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

use crate::domain::Clock;

/// A clock fixed at a start time that tests advance by hand.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock reading the current system time until advanced.
    pub fn new() -> Self {
        ManualClock {
            now: Mutex::new(Utc::now()),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
