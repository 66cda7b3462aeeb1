//! The public API's open transactions on one replica: a handle per `Begin`, the
//! transaction behind it, and — once committed — the answer, so a `Commit` sent again
//! with the same handle gets the same answer and never commits twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::Transaction;
use megastore_rpc::pb::client as pb;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tonic::Status;

/// Transactions unused this long are dropped (committed ones too: their answer is
/// kept as long).
pub(crate) const SESSION_IDLE_MAX: Duration = Duration::from_secs(60);
/// Open transactions one replica keeps at most.
const SESSIONS_MAX: usize = 10_000;

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
}

/// The open transactions of one replica's gateway.
#[derive(Default)]
pub(crate) struct Sessions {
    sessions: std::sync::Mutex<HashMap<u64, Session>>,
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
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `txn` under a new handle.
    pub(crate) fn insert(&self, txn: Transaction) -> Result<u64, Status> {
        let mut sessions = self.map();
        sessions.retain(|_, s| s.last_used.elapsed() < SESSION_IDLE_MAX);
        if sessions.len() >= SESSIONS_MAX {
            return Err(Status::resource_exhausted(format!(
                "{SESSIONS_MAX} transactions are open on this replica; commit or abort some"
            )));
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
        };
        sessions.insert(handle, session);
        Ok(handle)
    }

    /// The state behind `handle`, locked for one call.
    pub(crate) async fn locked(&self, handle: u64) -> Result<Locked, Status> {
        let state = {
            let mut sessions = self.map();
            let session = sessions.get_mut(&handle).ok_or_else(|| {
                Status::not_found(format!(
                    "txn: no open transaction {handle} on this replica (it ended, expired after {SESSION_IDLE_MAX:?} unused, or began elsewhere)"
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
