//! Each node's clock: an offset and a rate error within the drift bound.

use megastore_types::Time;

/// A node's clock relative to real (simulation) time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    offset_ns: u64,
    drift_ppm: i64,
}

const MILLION: i128 = 1_000_000;

impl Clock {
    /// A clock `offset_ns` ahead of real time that runs `drift_ppm` fast (negative:
    /// slow).
    pub(crate) fn new(offset_ns: u64, drift_ppm: i64) -> Self {
        Self {
            offset_ns,
            drift_ppm,
        }
    }

    /// How far ahead of real time it started, in ms.
    pub(crate) fn offset_ms(&self) -> i64 {
        i64::try_from(self.offset_ns / 1_000_000).unwrap_or(i64::MAX)
    }

    /// The node's reading at real time `real_ns`.
    pub(crate) fn local(&self, real_ns: u64) -> Time {
        let scaled = i128::from(real_ns) * (MILLION + i128::from(self.drift_ppm)) / MILLION;
        Time(self.offset_ns + scaled as u64)
    }

    /// The first real time at which the node's reading is at least `local`.
    pub(crate) fn real(&self, local: Time) -> u64 {
        let since_origin = i128::from(local.0.saturating_sub(self.offset_ns));
        let rate = MILLION + i128::from(self.drift_ppm);
        let real = (since_origin * MILLION + rate - 1) / rate;
        u64::try_from(real).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_inverts_local() {
        for drift in [-1000, 0, 700] {
            let clock = Clock::new(5_000, drift);
            for real in [0u64, 1, 999_999, 123_456_789_012] {
                let local = clock.local(real);
                assert!(clock.real(local) <= real, "{drift} {real}");
                assert!(clock.local(clock.real(local)) >= local);
            }
        }
    }
}
