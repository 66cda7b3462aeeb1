//! The lock service — our Chubby: sessions with leases, locks with fencing tokens
//! (sequencers), linearizable holder queries, small consistent files, and keys
//! attached to a lease (applications' leases are sessions with their own ttl).
//!
//! Responsibility: the service's meaning, once. [`LockCore`] is the deterministic state
//! machine every lock node applies (the simulator hosts it behind partitionable lock
//! nodes; `lockd` replicates it with openraft). [`LockService`] is the synchronous API,
//! [`LocalLockService`] an in-process implementation, [`conformance`] the suite every
//! implementation passes, [`LockClient`] the pure client state machine that finds
//! the leading node, and [`QuorumModel`] the service as a host without Raft sees it
//! (who answers, and when leadership moves).
//!
//! Not here: networking, persistence, elections (the host of the core provides them).
//!
//! Invariants:
//! - a lock has at most one holder, whose session is live;
//! - sequencers strictly increase across all acquisitions, so they fence;
//! - a revoked session is never renewed, and its locks are held until its lease ends or
//!   its holder closes it (having stopped acting) — never reported free while the holder
//!   may still act within its lease;
//! - a new leader restarts every lease on its own clock (never shortening one);
//! - a leased key lives exactly as long as its session (*leased-keys-die-with-lease*),
//!   and its revision, like every sequencer, comes from one counter that only grows;
//! - applications' names (`app/…`) and the lease commands act only on sessions
//!   granted as leases, so no application request renews or ends the cluster's own
//!   sessions (*leases-apart*).

pub mod client;
pub mod conformance;
mod core;
pub mod messages;
mod quorum;
mod service;

pub use client::{LockClient, LockOutcome, LockSend};

use std::time::Duration;

/// How long a holder may count on a lease of `lease`, measured on its own clock from
/// when it *sent* the request that granted or renewed it: shortened by twice the drift
/// bound (its clock and the service's may err in opposite directions) and `margin`.
/// It then ends before the service could call the lease lapsed. Coordinators judge
/// their lock's lease by it, and applications their leases (`Lease::valid_until` in
/// the client library): one rule for both.
pub fn holder_lease(lease: Duration, max_clock_drift_ppm: u32, margin: Duration) -> Duration {
    let drift = lease.mul_f64(2.0 * f64::from(max_clock_drift_ppm) / 1e6);
    lease.saturating_sub(drift).saturating_sub(margin)
}
pub use core::{
    ADMIN_FILES_PREFIX, APP_PREFIX, AUTH_FILES_PREFIX, LEASE_TTL_MAX, LEASE_TTL_MIN,
    LEASED_KEYS_PER_LEASE_MAX, LEASED_NAME_BYTES_MAX, LEASED_VALUE_BYTES_MAX, LeasedKey,
    LockCommand, LockCore, LockError, LockFile, LockHolder, LockReply, PLACEMENT_FILES_PREFIX,
    Sequencer, SessionId,
};
pub use messages::{LockRequest, LockResponse};
pub use quorum::QuorumModel;
pub use service::{LocalLockService, LockService, LockServiceExt};

#[cfg(test)]
mod conformance_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use megastore_types::Time;

    use crate::conformance::LockHarness;
    use crate::service::LocalLockService;

    /// The in-process service on a manual clock.
    struct LocalHarness {
        clock: Arc<AtomicU64>,
        service: LocalLockService,
    }

    impl LocalHarness {
        fn new() -> Self {
            let clock = Arc::new(AtomicU64::new(1_000));
            let reading = Arc::clone(&clock);
            let service = LocalLockService::new(Duration::from_secs(10), move || {
                Time(reading.load(Ordering::SeqCst))
            });
            Self { clock, service }
        }
    }

    impl LockHarness for LocalHarness {
        type Service = LocalLockService;

        fn service(&self) -> &LocalLockService {
            &self.service
        }

        fn advance(&mut self, duration: Duration) {
            self.clock
                .fetch_add(duration.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    crate::lock_service_conformance_tests!(LocalHarness::new());
}

#[cfg(test)]
mod holder_lease_tests {
    use std::time::Duration;

    use super::holder_lease;

    #[test]
    fn a_holder_counts_on_the_lease_less_twice_the_drift_and_the_margin() {
        let lease = Duration::from_secs(10);
        assert_eq!(holder_lease(lease, 0, Duration::ZERO), lease);
        // 200 ppm each way of 10 s is 2 ms; twice that, and the margin.
        assert_eq!(
            holder_lease(lease, 200, Duration::from_millis(100)),
            Duration::from_millis(10_000 - 4 - 100)
        );
        assert_eq!(
            holder_lease(Duration::from_millis(50), 200, Duration::from_millis(100)),
            Duration::ZERO,
            "a margin longer than the lease leaves nothing to count on"
        );
    }
}
