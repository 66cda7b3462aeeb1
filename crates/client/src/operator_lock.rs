//! One operator tool of a kind acting at a time: a lock in lockd (outside the
//! applications' namespace) held by a plain session of the lock service's lease, kept
//! alive in the background. Background rebalancers use it so that any number can run —
//! one per site, say — while one plans and moves and the others stand by to take over
//! when its lease lapses.
//!
//! The lock keeps tools from working against each other; it is not what makes their
//! work safe. Every placement write is a compare-and-set on the placement's version
//! and a second move of a range is refused, so a holder paused past its lease that
//! wakes up and writes is refused or makes a move that is safe on its own. That is why
//! no fencing token is carried: the holder judges its lease by its own clock
//! ([`megastore_lock::holder_lease`], the coordinators' rule) and checks it before
//! each move it starts, so that two tools rarely move at once, never unsafely.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use megastore_lock::{LockCommand, LockError, LockHolder, LockReply, SessionId};
use megastore_rpc::LockdClient;

use crate::client::ClientError;

/// Where operator tools' locks live in lockd's namespace.
pub const OPERATOR_LOCKS: &str = "operator/";
/// The operator lock background rebalancers (`megastore range rebalance --every`)
/// lead by.
pub const REBALANCER_LOCK: &str = "rebalancer";

/// The full name in lockd of operator lock `name`.
pub fn operator_lock_name(name: &str) -> String {
    format!("{OPERATOR_LOCKS}{name}")
}

/// A held operator lock.
pub struct OperatorLock {
    lockd: Arc<LockdClient>,
    name: String,
    session: SessionId,
    /// Until when this holder may count on its session (its monotonic clock).
    valid_until: Arc<Mutex<Instant>>,
    /// The session ended (a keep-alive was refused): the lock is gone.
    lost: Arc<AtomicBool>,
    keeper: tokio::task::JoinHandle<()>,
}

/// What [`OperatorLock::take`] found.
pub enum Taken {
    /// This tool holds the lock now.
    Held(OperatorLock),
    /// Another session holds it.
    HeldBy(LockHolder),
}

/// How often a holder renews a session of `lease`: three times per lease, so that one
/// lost or slow answer does not lapse it (never a busy loop, whatever lockd answers).
fn keep_alive_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

fn lock_error(e: LockError) -> ClientError {
    ClientError::Lock(e.to_string())
}

impl OperatorLock {
    /// Takes the operator lock `name` (under [`OPERATOR_LOCKS`]) for `owner`, in a new
    /// session kept alive from a background task (call it inside a tokio runtime), or
    /// says who holds it. `max_clock_drift_ppm`: the cluster's drift bound, by which the
    /// holder shortens its lease.
    pub async fn take(
        lockd: Arc<LockdClient>,
        name: &str,
        owner: &str,
        max_clock_drift_ppm: u32,
    ) -> Result<Taken, ClientError> {
        if name.is_empty() || name.contains('/') {
            return Err(ClientError::InvalidArgument(format!(
                "operator lock name {name:?}: must be non-empty, without '/'"
            )));
        }
        let lock = operator_lock_name(name);
        let sent = Instant::now();
        let reply = lockd
            .execute(LockCommand::OpenSession {
                owner: owner.to_string(),
            })
            .await
            .map_err(lock_error)?;
        let LockReply::Session { session, lease } = reply else {
            return Err(ClientError::Lock(format!("unexpected reply {reply:?}")));
        };
        let held = lockd
            .execute(LockCommand::Acquire {
                session,
                lock: lock.clone(),
            })
            .await;
        let holder = match held {
            Ok(LockReply::Acquired { .. }) => None,
            Ok(other) => {
                return Err(ClientError::Lock(format!("unexpected reply {other:?}")));
            }
            Err(LockError::Held(holder)) => Some(holder),
            Err(e) => return Err(lock_error(e)),
        };
        if let Some(holder) = holder {
            // Best effort: an unclosed session lapses within one lease anyway.
            let _ = lockd.execute(LockCommand::CloseSession { session }).await;
            return Ok(Taken::HeldBy(holder));
        }
        let holder_lease =
            move |lease| megastore_lock::holder_lease(lease, max_clock_drift_ppm, Duration::ZERO);
        let valid_until = Arc::new(Mutex::new(sent + holder_lease(lease)));
        let lost = Arc::new(AtomicBool::new(false));
        let keeper = tokio::spawn({
            let (lockd, valid_until, lost) = (lockd.clone(), valid_until.clone(), lost.clone());
            async move {
                let mut every = keep_alive_every(lease);
                loop {
                    tokio::time::sleep(every).await;
                    let sent = Instant::now();
                    match lockd.execute(LockCommand::KeepAlive { session }).await {
                        Ok(LockReply::Renewed { lease }) => {
                            every = keep_alive_every(lease);
                            *valid_until.lock().unwrap_or_else(PoisonError::into_inner) =
                                sent + holder_lease(lease);
                        }
                        Err(LockError::SessionExpired(_) | LockError::SessionRevoked(_)) => {
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        // Unreachable for now: the lease runs down; try again.
                        _ => {}
                    }
                }
            }
        });
        Ok(Taken::Held(OperatorLock {
            lockd,
            name: lock,
            session,
            valid_until,
            lost,
            keeper,
        }))
    }

    /// The lock's full name in lockd.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this holder may still count on the lock: its session was never refused
    /// and its lease, judged by this process's clock, has not run out.
    pub fn is_held(&self) -> bool {
        !self.lost.load(Ordering::SeqCst)
            && Instant::now()
                < *self
                    .valid_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the lock back (closing its session), so a tool standing by takes it at
    /// once rather than a lease later.
    pub async fn release(self) -> Result<(), ClientError> {
        self.keeper.abort();
        self.lockd
            .execute(LockCommand::CloseSession {
                session: self.session,
            })
            .await
            .map(|_| ())
            .map_err(lock_error)
    }
}

impl Drop for OperatorLock {
    fn drop(&mut self) {
        // Dropped without release: stop renewing; the session lapses within a lease.
        self.keeper.abort();
    }
}
