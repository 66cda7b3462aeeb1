//! lockd's state machine: the lock service's [`LockCore`], applied from the Raft log.
//!
//! The state lives in memory; what survives a restart is the last snapshot (kept in the
//! store) plus the log after it, which openraft applies again up to the saved commit
//! index. Applying is deterministic: entries carry the leader's clock.

// openraft's storage traits fix the error type; it is large, and errors are rare.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use megastore_lock::{LockCommand, LockCore, LockReply};
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::dedup::Applied;
use crate::storage::{Cells, SNAPSHOT};
use crate::types::{LeaseClock, LockEntry, LockResult, RaftNodeId, TypeConfig};

type StorageResult<T> = Result<T, StorageError<RaftNodeId>>;

/// Everything applied so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LockState {
    pub(crate) core: LockCore,
    pub(crate) last_applied: Option<LogId<RaftNodeId>>,
    pub(crate) membership: StoredMembership<RaftNodeId, BasicNode>,
    /// Whose clock the leases are counted on.
    pub(crate) lease_clock: LeaseClock,
    /// Recent results by request id, so resends are not applied twice.
    #[serde(default)]
    pub(crate) applied: Applied,
}

impl LockState {
    fn new(lease: Duration) -> Self {
        Self {
            core: LockCore::new(lease),
            last_applied: None,
            membership: StoredMembership::default(),
            lease_clock: LeaseClock::default(),
            applied: Applied::default(),
        }
    }
}

/// A stored snapshot: its metadata and the state it captures.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<RaftNodeId, BasicNode>,
    state: LockState,
}

fn sm_error(verb: ErrorVerb, e: impl ToString) -> StorageError<RaftNodeId> {
    StorageError::IO {
        source: StorageIOError::new(
            ErrorSubject::StateMachine,
            verb,
            AnyError::error(e.to_string()),
        ),
    }
}

/// The state machine; clones share the state (the server reads it to know whether the
/// current leader has restarted the leases).
#[derive(Clone)]
pub(crate) struct StateMachine {
    state: Arc<Mutex<LockState>>,
    /// Whose clock the leases are counted on, for the server (which must not hold the
    /// store open through the state machine).
    lease_clock: Arc<Mutex<LeaseClock>>,
    cells: Cells,
    snapshots_built: Arc<Mutex<u64>>,
}

/// The state machine's applied state, shared with the server, which must not hold the
/// store open through the state machine.
#[derive(Clone)]
pub(crate) struct AppliedState(Arc<Mutex<LockState>>);

impl AppliedState {
    /// Its answer to a command that only reads (`LockCore::read`).
    pub(crate) fn read(&self, command: &LockCommand) -> Option<LockResult> {
        let state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        state.core.read(command)
    }
}

impl StateMachine {
    /// The state from the last stored snapshot, or empty.
    pub(crate) fn open(cells: Cells, lease: Duration) -> Result<Self, String> {
        let stored: Option<StoredSnapshot> = cells.get(SNAPSHOT)?;
        let state = stored.map_or_else(|| LockState::new(lease), |s| s.state);
        Ok(Self {
            lease_clock: Arc::new(Mutex::new(state.lease_clock)),
            state: Arc::new(Mutex::new(state)),
            cells,
            snapshots_built: Arc::new(Mutex::new(0)),
        })
    }

    /// Whose clock the leases are counted on, kept current by applying.
    pub(crate) fn lease_clock(&self) -> Arc<Mutex<LeaseClock>> {
        Arc::clone(&self.lease_clock)
    }

    /// The applied state, for the server to answer reads from (without the store).
    pub(crate) fn applied(&self) -> AppliedState {
        AppliedState(Arc::clone(&self.state))
    }

    fn publish_lease_clock(&self, clock: LeaseClock) {
        *self.lease_clock.lock().unwrap_or_else(|p| p.into_inner()) = clock;
    }

    fn state(&self) -> MutexGuard<'_, LockState> {
        // A panic while applying would have stopped the node; a poisoned lock still
        // holds the last consistent state, since apply mutates only after checks.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store_snapshot(&self, stored: &StoredSnapshot) -> StorageResult<()> {
        self.cells
            .put(SNAPSHOT, stored)
            .map_err(|e| sm_error(ErrorVerb::Write, e))
    }
}

fn apply_one(state: &mut LockState, entry: Entry<TypeConfig>) -> LockResult {
    state.last_applied = Some(entry.log_id);
    match entry.payload {
        EntryPayload::Blank => Ok(LockReply::Done),
        EntryPayload::Membership(membership) => {
            state.membership = StoredMembership::new(Some(entry.log_id), membership);
            Ok(LockReply::Done)
        }
        EntryPayload::Normal(LockEntry::Command {
            at,
            command,
            request,
        }) => {
            if let Some(first) = request.and_then(|id| state.applied.get(id)) {
                return first.clone();
            }
            let result = state.core.apply(at, &command);
            state.core.check_invariants();
            if let Some(id) = request {
                state.applied.remember(id, result.clone());
            }
            result
        }
        EntryPayload::Normal(LockEntry::RestartLeases { at, clock }) => {
            state.core.restart_leases(at);
            state.lease_clock = clock;
            Ok(LockReply::Done)
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let state = self.state().clone();
        let count = {
            let mut built = self
                .snapshots_built
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *built += 1;
            *built
        };
        let snapshot_id = match state.last_applied {
            Some(id) => format!("{}-{}-{count}", id.leader_id, id.index),
            None => format!("empty-{count}"),
        };
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id,
        };
        let data = serde_json::to_vec(&state).map_err(|e| sm_error(ErrorVerb::Write, e))?;
        self.store_snapshot(&StoredSnapshot {
            meta: meta.clone(),
            state,
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(
        Option<LogId<RaftNodeId>>,
        StoredMembership<RaftNodeId, BasicNode>,
    )> {
        let state = self.state();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<LockResult>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state();
        let results = entries
            .into_iter()
            .map(|e| apply_one(&mut state, e))
            .collect();
        self.publish_lease_clock(state.lease_clock);
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<RaftNodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let state: LockState =
            serde_json::from_slice(snapshot.get_ref()).map_err(|e| sm_error(ErrorVerb::Read, e))?;
        self.store_snapshot(&StoredSnapshot {
            meta: meta.clone(),
            state: state.clone(),
        })?;
        self.publish_lease_clock(state.lease_clock);
        *self.state() = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let stored: Option<StoredSnapshot> = self
            .cells
            .get(SNAPSHOT)
            .map_err(|e| sm_error(ErrorVerb::Read, e))?;
        stored
            .map(|s| {
                let data =
                    serde_json::to_vec(&s.state).map_err(|e| sm_error(ErrorVerb::Read, e))?;
                Ok(Snapshot {
                    meta: s.meta,
                    snapshot: Box::new(Cursor::new(data)),
                })
            })
            .transpose()
    }
}
