//! Carrying out a replica's outputs over any [`RowStore`]: the one loop every host of a
//! [`Replica`] runs (the replica server, the simulator, the core's tests), so the
//! durability rule is kept once, and by the types rather than by list order.
//!
//! ```text
//!   Replica::step_into(input, store, &mut batch)   (once or many times)
//!       Load ──► read the root row and records ──► Input::Loaded (stepped at once)
//!       ListGroups ──► read the registry ──► Input::Listed (stepped at once)
//!       ListData ──► read a group's data rows ──► Input::DataListed (stepped at once)
//!       Index ──► held for the batch's write (synced with the state it lists)
//!       Persist / Install ──► held for the batch's write; the batch now needs a sync
//!       Apply ──► held for the batch's write (a mark's: the batch now needs a sync)
//!       CollectGarbage ──► the held writes first, then collected
//!       ReadData / ReadSnapshot ──► the held writes first, then answered, held
//!       Send ──► held
//!   batch.release(store) ──► one write of what is held ──► one sync if needed
//!                        ──► the held messages
//! ```
//!
//! Invariant (*durable before sent*): the messages of a batch are reachable only
//! through [`Batch::release`], which syncs the store first whenever the batch wrote
//! replication state — so no reply leaves before the state it depends on is durable,
//! however many steps share the one sync.
//!
//! Invariant (*reads see the batch*): every read of the store, by the core's outputs or
//! by the host between steps ([`Batch::write_held`]), comes after the batch's held
//! writes reach the store, in the order the outputs made them. Writes are held so
//! that a batch makes one store write, not one per output: a replica made several per
//! commit, and each store write costs a write-path round of its own (RocksDB's write
//! group, WAL record and row locks). A crash loses what is held exactly as it
//! loses buffered writes: the batch had not synced them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use megastore_rowstore::{
    Durability, KeyRange, LATEST, RowMutation, RowStore, RowStoreError, ScanOptions,
    check_rows_in_range,
};
use megastore_types::{ClientId, EgId, NodeId, ReplicaId, Time};

use super::{Input, Output, Replica, answer_read, answer_snapshot};
use crate::entry::{data_range, global_index_range, group_range};
use crate::messages::{Message, ReplicaRequest};

/// The caller a host names for its own requests to its replica: their replies go
/// nowhere.
pub const DRIVER_CLIENT: ClientId = ClientId(u32::MAX);

/// Rows deleted per atomic batch when a span is retired.
const RETIRE_PAGE_ROWS: usize = 256;

/// Held writes of about this many bytes are written at once, not at the batch's end:
/// a batch of large entries would otherwise hold a copy of each until it is released.
const HELD_BYTES_MAX: usize = 4 << 20;

/// The input that loads group `eg` (its state asked for by the host itself): what a
/// host steps for every registered group when its replica starts, so the sweep looks
/// after idle groups too.
pub fn load_group(eg: EgId) -> Input {
    Input::Message {
        from: NodeId::Client(DRIVER_CLIENT),
        message: Message::ReplicaRequest(ReplicaRequest::LogState { id: 0, eg }),
    }
}

/// The effects of one or more steps, written to the store but not yet synced, and the
/// messages that wait for the sync.
#[derive(Debug, Default)]
pub struct Batch {
    sends: Vec<(NodeId, Message)>,
    needs_sync: bool,
    reply_before_sync: bool,
    wake: Option<Time>,
    outboxes: BTreeSet<EgId>,
    prepared: BTreeSet<EgId>,
    decided: BTreeSet<EgId>,
    applied: BTreeMap<EgId, u64>,
    counts: BatchCounts,
    voter_passes: Vec<super::VoterPassReport>,
    failed_installs: Vec<FailedInstall>,
    held: Vec<RowMutation>,
    held_bytes: usize,
}

/// What a batch did, for a host's metrics and statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchCounts {
    /// Root-row mutations written.
    pub persists: u64,
    /// Entries applied (apply batches).
    pub applies: u64,
    /// Snapshots installed.
    pub installs: u64,
    /// Snapshot installs asked for that did not happen ([`Batch::take_failed_installs`]).
    pub failed_installs: u64,
    /// Garbage collections run.
    pub collections: u64,
    /// Catch-up requests sent to other replicas (`ReadLog`, `Snapshot`).
    pub catchup_requests: u64,
}

/// A snapshot install that did not happen ([`super::Output::InstallFailed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedInstall {
    /// The group.
    pub eg: EgId,
    /// The replica asked for the snapshot.
    pub source: ReplicaId,
    /// Why.
    pub why: super::InstallFailure,
}

/// What may happen once a batch is released.
#[derive(Debug)]
pub struct Released {
    /// The messages, in the order the steps produced them.
    pub sends: Vec<(NodeId, Message)>,
    /// The store was synced for them.
    pub synced: bool,
    /// When the replica wants its next tick, if it said.
    pub wake: Option<Time>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// The groups whose applied entries (or installed snapshots) in this batch hold
    /// queue messages in their outbox: what a host that delivers them looks at.
    pub fn outbox_groups(&self) -> &BTreeSet<EgId> {
        &self.outboxes
    }

    /// The groups whose applied entries (or installed snapshots) in this batch prepared
    /// cross-group transactions there: what a host that settles abandoned ones looks
    /// at.
    pub fn prepared_groups(&self) -> &BTreeSet<EgId> {
        &self.prepared
    }

    /// The groups whose applied entries (or installed snapshots) in this batch recorded
    /// cross-group decisions there: what a host that collects old decisions looks at.
    pub fn decided_groups(&self) -> &BTreeSet<EgId> {
        &self.decided
    }

    /// The log entries applied in this batch, by group: what a host that reports
    /// commit rates (per range, say) counts.
    pub fn applied_entries(&self) -> &BTreeMap<EgId, u64> {
        &self.applied
    }

    /// The voter catch-up passes that ended in this batch: what a host that runs
    /// them for the operator answers with (their outcome depends on no state of this
    /// batch, so they need not wait for its sync).
    pub fn take_voter_passes(&mut self) -> Vec<super::VoterPassReport> {
        std::mem::take(&mut self.voter_passes)
    }

    /// The snapshot installs that did not happen in this batch: what a host reports
    /// (a group needing one stays behind until one does).
    pub fn take_failed_installs(&mut self) -> Vec<FailedInstall> {
        std::mem::take(&mut self.failed_installs)
    }

    /// What the batch did so far.
    pub fn counts(&self) -> BatchCounts {
        self.counts
    }

    /// Writes what the batch holds to `store` (buffered, in one atomic write): what a
    /// host calls before it reads the store itself in the middle of a batch (invariant
    /// *reads see the batch*).
    pub fn write_held<S: RowStore>(&mut self, store: &S) -> Result<(), RowStoreError> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.held_bytes = 0;
        let held = std::mem::take(&mut self.held);
        store.mutate_rows(&KeyRange::all(), &held, Durability::Buffered)
    }

    /// Holds `mutations` for the batch's write.
    fn hold<S: RowStore>(
        &mut self,
        store: &S,
        mutations: impl IntoIterator<Item = RowMutation>,
    ) -> Result<(), RowStoreError> {
        for mutation in mutations {
            self.held_bytes += mutation.size_bytes();
            self.held.push(mutation);
        }
        if self.held_bytes > HELD_BYTES_MAX {
            self.write_held(store)?;
        }
        Ok(())
    }

    /// Writes what the batch holds, syncs `store` if the batch wrote replication state,
    /// then hands out its messages. (With the `reply-before-sync` knob, the sync is
    /// skipped: the messages leave on buffered state a crash can lose.)
    pub fn release<S: RowStore>(mut self, store: &S) -> Result<Released, RowStoreError> {
        self.write_held(store)?;
        let synced = self.needs_sync && !self.reply_before_sync;
        if synced {
            store.sync()?;
        }
        Ok(Released {
            sends: self.sends,
            synced,
            wake: self.wake,
        })
    }

    /// Drops the batch without writing or sending anything (its process crashed before
    /// the sync: what it held is lost as buffered writes are).
    pub fn discard(self) {}
}

impl Replica {
    /// Steps the replica on `input` and carries out its outputs on `store`, feeding
    /// back what reading the store produces (a loaded root row), into `batch`.
    pub fn step_into<S: RowStore>(
        &mut self,
        now: Time,
        input: Input,
        store: &S,
        batch: &mut Batch,
    ) -> Result<(), RowStoreError> {
        batch.reply_before_sync |= self.config.bugs.reply_before_sync();
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            for output in self.step(now, input) {
                #[cfg(feature = "sim-bugs")]
                let output = global_index_knobs(&self.config.bugs, output);
                if let Some(next) = carry_out(output, store, batch)? {
                    inputs.push_back(next);
                }
            }
        }
        Ok(())
    }
}

/// The global index knobs: `global-copies-skip-deletes` (an apply copies the mirror's
/// sets to the global index but not its deletes, so removed entries stay behind) and
/// `install-without-global` (a snapshot install copies nothing).
#[cfg(feature = "sim-bugs")]
fn global_index_knobs(bugs: &crate::ProtocolBugs, output: Output) -> Output {
    match output {
        Output::Install { eg, rows, .. } if bugs.install_without_global() => Output::Install {
            eg,
            global: Vec::new(),
            rows,
        },
        Output::Apply {
            eg,
            mut global,
            rows,
            entries,
            durability,
        } if bugs.global_copies_skip_deletes() => {
            for copy in &mut global {
                copy.mutations
                    .retain(|m| matches!(m, megastore_rowstore::Mutation::Set { .. }));
            }
            Output::Apply {
                eg,
                global,
                rows,
                entries,
                durability,
            }
        }
        other => other,
    }
}

/// Notes `eg` in the batch if `rows` set any of its outbox rows (queue messages sent),
/// or prepare or decide a cross-group transaction there.
fn note_outbox(batch: &mut Batch, eg: EgId, rows: &[megastore_rowstore::RowMutation]) {
    if crate::two_phase::prepares_any(&eg, rows) {
        batch.prepared.insert(eg.clone());
    }
    if crate::two_phase::decides_any(&eg, rows) {
        batch.decided.insert(eg.clone());
    }
    let outbox = crate::queue::outbox_range(&eg);
    let sends = rows.iter().any(|m| {
        outbox.contains(&m.row)
            && m.mutations
                .iter()
                .any(|m| matches!(m, megastore_rowstore::Mutation::Set { .. }))
    });
    if sends {
        batch.outboxes.insert(eg);
    }
}

/// Whether carrying out `output` reads the store (or writes it other than through the
/// batch's held writes): the held writes go to the store first (invariant *reads see
/// the batch*). Exhaustive, so that a new output decides.
fn uses_store_now(output: &Output) -> bool {
    match output {
        Output::Load { .. }
        | Output::ListGroups { .. }
        | Output::ListData { .. }
        | Output::Retire { .. }
        | Output::CollectGarbage { .. }
        | Output::CollectGlobalGarbage { .. }
        | Output::ReadSnapshot { .. }
        | Output::ReadData { .. }
        | Output::ListForPass { .. } => true,
        Output::Index { .. }
        | Output::Persist { .. }
        | Output::PersistPlacement { .. }
        | Output::Apply { .. }
        | Output::Install { .. }
        | Output::Send { .. }
        | Output::WakeAt(_)
        | Output::VoterPassEnded(_)
        | Output::InstallFailed { .. } => false,
    }
}

/// Carries out one output; a load's answer is the next input.
fn carry_out<S: RowStore>(
    output: Output,
    store: &S,
    batch: &mut Batch,
) -> Result<Option<Input>, RowStoreError> {
    if uses_store_now(&output) {
        batch.write_held(store)?;
    }
    match output {
        Output::Load {
            eg,
            root_row,
            records,
        } => {
            let row = store.read_row(&root_row, &KeyRange::all(), LATEST)?;
            let prepared = match records {
                true => super::prepared_records(store, &eg, LATEST)?
                    .into_iter()
                    .map(|record| record.key)
                    .collect(),
                false => Vec::new(),
            };
            return Ok(Some(Input::Loaded { eg, row, prepared }));
        }
        Output::ListGroups {
            which,
            after,
            limit,
            for_peer,
        } => {
            let groups = super::list(store, which, after.as_ref(), limit)?;
            return Ok(Some(Input::Listed {
                which,
                groups,
                for_peer,
            }));
        }
        Output::ListData { eg } => {
            let rows = store.scan(&data_range(&eg), LATEST, &ScanOptions::default())?;
            return Ok(Some(Input::DataListed { eg, rows }));
        }
        Output::Retire { groups } => {
            // Synced: a lost deletion would leave rows no placement names again.
            super::retire_range(store, &groups, RETIRE_PAGE_ROWS, Durability::Buffered)?;
            batch.needs_sync = true;
        }
        Output::Index { mutation } => batch.hold(store, [mutation])?,
        Output::Persist { mutation } | Output::PersistPlacement { mutation } => {
            batch.hold(store, [mutation])?;
            batch.needs_sync = true;
            batch.counts.persists += 1;
        }
        Output::Apply {
            eg,
            global,
            rows,
            entries,
            durability,
        } => {
            // The global copies go first, so a crash that keeps the `applied` marker
            // keeps them.
            check_rows_in_range(&global_index_range(), &global)?;
            check_rows_in_range(&group_range(&eg), &rows)?;
            batch.needs_sync |= durability == Durability::Synced;
            batch.counts.applies += 1;
            *batch.applied.entry(eg.clone()).or_default() += entries;
            note_outbox(batch, eg, &rows);
            batch.hold(store, global.into_iter().chain(rows))?;
        }
        Output::Install { eg, global, rows } => {
            check_rows_in_range(&global_index_range(), &global)?;
            check_rows_in_range(&group_range(&eg), &rows)?;
            batch.needs_sync = true;
            batch.counts.installs += 1;
            note_outbox(batch, eg, &rows);
            batch.hold(store, global.into_iter().chain(rows))?;
        }
        Output::CollectGarbage { eg, below } => {
            // After the `collected` watermark's write, in the same order in the store's
            // log: a crash keeps a prefix, never the collection without the watermark.
            store.collect_garbage(&data_range(&eg), below.0)?;
            batch.counts.collections += 1;
        }
        Output::ReadSnapshot {
            to,
            id,
            eg,
            at,
            slot,
        } => {
            let reply = answer_snapshot(store, id, &eg, at, slot);
            batch.sends.push((to, Message::ReplicaReply(reply)));
        }
        Output::CollectGlobalGarbage { rows, below } => {
            for row in rows {
                let mut end = row.clone();
                end.push(0);
                let just_this_row = KeyRange {
                    start: row,
                    end: Some(end),
                };
                store.collect_garbage(&just_this_row, below.0)?;
            }
        }
        Output::ReadData {
            to,
            id,
            eg,
            at,
            query,
            next_leader,
            locks,
        } => {
            let reply = answer_read(store, id, eg.as_ref(), at, &query, next_leader, locks);
            batch.sends.push((to, Message::ReplicaReply(reply)));
        }
        Output::Send { to, message } => {
            if matches!(
                message,
                Message::ReplicaRequest(
                    ReplicaRequest::ReadLog { .. } | ReplicaRequest::Snapshot { .. }
                )
            ) {
                batch.counts.catchup_requests += 1;
            }
            batch.sends.push((to, message));
        }
        Output::WakeAt(at) => batch.wake = Some(at),
        Output::ListForPass { groups, limit } => {
            let groups = super::registered_in(store, &groups, limit)?;
            return Ok(Some(Input::VoterPassListed { groups }));
        }
        Output::VoterPassEnded(report) => batch.voter_passes.push(report),
        Output::InstallFailed { eg, source, why } => {
            batch.counts.failed_installs += 1;
            batch
                .failed_installs
                .push(FailedInstall { eg, source, why });
        }
    }
    Ok(None)
}
