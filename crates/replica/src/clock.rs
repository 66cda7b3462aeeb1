//! The process clock the state machines read through their drivers.

use std::time::Instant;

use megastore_types::Time;

/// A monotonic clock whose origin is when the process started it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock reading zero now.
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// The current reading.
    pub fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The instant of a reading, for timers.
    pub fn instant(&self, at: Time) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.origin + std::time::Duration::from_nanos(at.as_nanos()))
    }
}
