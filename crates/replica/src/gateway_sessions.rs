//! The public API's open transactions on one replica: a handle per `Begin`, the
//! transaction behind it, and — once committed — the answer, so a `Commit` sent again
//! with the same handle gets the same answer and never commits twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::Transaction;
use megastore_rpc::pb::client as pb;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tonic::Status;

/// What a handle stands for.
pub(crate) enum SessionState {
    /// A transaction that may still read, write and commit.
    Open(Box<Transaction>),
    /// Its commit ended with this answer.
    Committed(Result<pb::CommitResponse, Status>),
}

/// A handle's state, locked for one call at a time (a commit holds it until done).
pub(crate) type Locked = OwnedMutexGuard<SessionState>;

struct Session {
    state: Arc<Mutex<SessionState>>,
    last_used: Instant,
    /// The connection that began it (peer address and port), if known.
    connection: Option<SocketAddr>,
}

/// The open transactions of one replica's gateway, bounded by `[gateway]`:
/// transactions unused for `idle_txn_ms` are dropped (committed ones too: their answer
/// is kept as long), and there are at most `open_txns_max` of them, at most
/// `open_txns_per_connection` from one connection.
pub(crate) struct Sessions {
    sessions: std::sync::Mutex<HashMap<u64, Session>>,
    idle_max: Duration,
    open_max: usize,
    per_connection_max: usize,
}

/// The open transaction behind a locked handle.
pub(crate) fn open(guard: &mut SessionState) -> Result<&mut Transaction, Status> {
    match guard {
        SessionState::Open(txn) => Ok(txn),
        SessionState::Committed(_) => Err(Status::failed_precondition(
            "txn: already committed; begin a new transaction",
        )),
    }
}

impl Sessions {
    /// No transactions yet, bounded by `limits`.
    pub(crate) fn new(limits: &megastore_config::GatewayLimits) -> Self {
        Self {
            sessions: std::sync::Mutex::new(HashMap::new()),
            idle_max: Duration::from_millis(limits.idle_txn_ms),
            open_max: limits.open_txns_max as usize,
            per_connection_max: limits.open_txns_per_connection as usize,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `txn`, begun by `connection`, under a new handle.
    pub(crate) fn insert(
        &self,
        txn: Transaction,
        connection: Option<SocketAddr>,
    ) -> Result<u64, Status> {
        let mut sessions = self.map();
        let idle_max = self.idle_max;
        sessions.retain(|_, s| s.last_used.elapsed() < idle_max);
        if sessions.len() >= self.open_max {
            return Err(Status::resource_exhausted(format!(
                "{} transactions are open on this replica ([gateway] open_txns_max); commit or abort some",
                self.open_max
            )));
        }
        if let Some(connection) = connection {
            let mine = sessions
                .values()
                .filter(|s| s.connection == Some(connection))
                .count();
            if mine >= self.per_connection_max {
                return Err(Status::resource_exhausted(format!(
                    "this connection ({connection}) has {mine} open transactions, the most one may ([gateway] open_txns_per_connection); commit or abort some"
                )));
            }
        }
        let handle = loop {
            let handle: u64 = rand::random();
            if handle != 0 && !sessions.contains_key(&handle) {
                break handle;
            }
        };
        let session = Session {
            state: Arc::new(Mutex::new(SessionState::Open(Box::new(txn)))),
            last_used: Instant::now(),
            connection,
        };
        sessions.insert(handle, session);
        Ok(handle)
    }

    /// The state behind `handle`, locked for one call.
    pub(crate) async fn locked(&self, handle: u64) -> Result<Locked, Status> {
        let state = {
            let mut sessions = self.map();
            // Expired is gone, whether or not a `Begin` has swept it out yet.
            if sessions
                .get(&handle)
                .is_some_and(|s| s.last_used.elapsed() >= self.idle_max)
            {
                sessions.remove(&handle);
            }
            let session = sessions.get_mut(&handle).ok_or_else(|| {
                Status::not_found(format!(
                    "txn: no open transaction {handle} on this replica (it ended, expired after {:?} unused ([gateway] idle_txn_ms), or began elsewhere)",
                    self.idle_max
                ))
            })?;
            session.last_used = Instant::now();
            Arc::clone(&session.state)
        };
        Ok(state.lock_owned().await)
    }

    /// Forgets `handle`.
    pub(crate) fn remove(&self, handle: u64) {
        self.map().remove(&handle);
    }
}
