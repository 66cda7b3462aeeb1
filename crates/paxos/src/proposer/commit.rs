//! Committing one transaction's log entry at a position (docs/protocol.md "Write"; paper
//! §4.6.3, Figure 8).
//!
//! The entry was built from a current read at `position - 1`. If another value wins
//! the position, the transaction conflicts — unless none of its reads were written by
//! the winner, in which case it is proposed again at the next position (a rebase),
//! which stays serializable: its reads are still current there.

use std::collections::BTreeSet;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::{LockError, LockReply};
use megastore_rowstore::KeyRange;
use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use super::Ctx;
use super::settle::{Settle, SettleOutcome};
use crate::entry::LogEntry;
use crate::messages::ReplicaReply;
use crate::two_phase::{Prepared, effective_writes, prepared_in};

/// Rebases before a commit reports a conflict (with no conflicting keys: a retry is
/// safe).
const REBASES_MAX: u32 = 4;

/// What a transaction read, for conflicts: rows by key, and key ranges it scanned (a
/// write anywhere in a scanned range conflicts, also to a row that did not exist when
/// it was scanned: no phantoms); and the cross-group transactions its reads found
/// prepared at its position, whose locks its commit must respect
/// (docs/protocol.md, "Two-phase commit").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSet {
    /// Rows read by key.
    pub rows: BTreeSet<Vec<u8>>,
    /// Ranges scanned.
    pub ranges: Vec<KeyRange>,
    /// Prepared transactions pending in the group at the read position.
    pub prepared: Vec<Prepared>,
}

impl ReadSet {
    /// Whether a write of `row` changes something this transaction read.
    pub fn covers(&self, row: &[u8]) -> bool {
        self.rows.contains(row) || self.ranges.iter().any(|r| r.contains(row))
    }

    /// Notes prepared transactions a read found pending (each once).
    pub fn saw_prepared(&mut self, prepared: &[Prepared]) {
        for p in prepared {
            if !self.prepared.iter().any(|q| q.txn == p.txn) {
                self.prepared.push(p.clone());
            }
        }
    }

    /// The prepared transactions it saw that lock out a commit of `writes` after these
    /// reads, with the rows they lock (sorted, de-duplicated).
    pub fn blocked_by<'w>(
        &self,
        writes: impl IntoIterator<Item = &'w [u8]> + Clone,
    ) -> (Vec<Prepared>, Vec<Vec<u8>>) {
        let mut keys = BTreeSet::new();
        let mut blocking = Vec::new();
        for p in &self.prepared {
            let locked = p.conflicts_with(self, writes.clone());
            if !locked.is_empty() {
                keys.extend(locked);
                blocking.push(p.clone());
            }
        }
        (blocking, keys.into_iter().collect())
    }
}

impl From<BTreeSet<Vec<u8>>> for ReadSet {
    fn from(rows: BTreeSet<Vec<u8>>) -> Self {
        Self {
            rows,
            ..Self::default()
        }
    }
}

/// How a commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitResult {
    /// Chosen at this position, and visible: every later current read sees it.
    Committed {
        /// The position (also the write's timestamp).
        position: Position,
        /// Chosen on the fast path: accepted at ballot 0 through the position's leader,
        /// with no prepare round and no move to a later position.
        fast: bool,
    },
    /// Another transaction won. `keys` are the rows this transaction read that were
    /// written in between, de-duplicated and sorted; empty means a retry is safe.
    Conflict {
        /// The conflicting rows.
        keys: Vec<Vec<u8>>,
    },
    /// The writer cannot tell whether it was chosen (it sent its value, then lost
    /// contact). Settling `position` and looking for the transaction id resolves it.
    Unknown {
        /// The position it may hold.
        position: Position,
    },
    /// Nothing was sent that could be chosen: not committed, retry is safe.
    Aborted,
}

/// A commit in progress.
#[derive(Debug)]
pub(crate) struct Commit {
    eg: EgId,
    txn: TxnId,
    entry: LogEntry,
    reads: ReadSet,
    settle: Settle,
    rebases: u32,
    sent_proposal: bool,
    report: Report,
}

/// Where a commit's result stands. A result is reported once; the commit then lives
/// on only while its settle still has work (with the acknowledge-early knob, which
/// reports as soon as the value is chosen).
#[derive(Debug)]
enum Report {
    NotYetKnown,
    Known(CommitResult),
    Reported,
}

impl Commit {
    /// Proposes `entry` at `position` (the read position plus one), through `leader`'s
    /// fast path if there is one.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        position: Position,
        leader: Option<ReplicaId>,
        entry: LogEntry,
        reads: ReadSet,
    ) -> Self {
        let txn = entry.txn.expect("a commit carries a transaction");
        let settle = Settle::start(ctx, eg.clone(), position, Some(entry.clone()), leader);
        let mut commit = Commit {
            eg,
            txn,
            entry,
            reads,
            settle,
            rebases: 0,
            sent_proposal: false,
            report: Report::NotYetKnown,
        };
        commit.advance(ctx);
        commit
    }

    /// Whether the commit has stayed on the fast path so far.
    fn on_fast_path(&self) -> bool {
        self.rebases == 0 && self.settle.later_rounds() == 0
    }

    /// The transaction.
    pub(crate) fn txn(&self) -> TxnId {
        self.txn
    }

    /// The result, the first time it is known (then `None`).
    pub(crate) fn take_result(&mut self) -> Option<CommitResult> {
        match std::mem::replace(&mut self.report, Report::Reported) {
            Report::Known(result) => Some(result),
            unreported @ Report::NotYetKnown => {
                self.report = unreported;
                None
            }
            Report::Reported => None,
        }
    }

    /// Whether nothing is left to do (result reported and settling finished).
    pub(crate) fn finished(&self) -> bool {
        matches!(self.report, Report::Reported) && self.settle.outcome().is_some()
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        self.settle.deadline()
    }

    fn advance<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.sent_proposal |= self.settle.sent_proposal();
        if !matches!(self.report, Report::NotYetKnown) {
            return;
        }
        if ctx.config.bugs.ack_before_invalidate()
            && let Some((_, chosen)) = self.settle.chosen()
            && chosen.txn == Some(self.txn)
        {
            self.report = Report::Known(CommitResult::Committed {
                position: self.settle.position(),
                fast: self.on_fast_path(),
            });
            return;
        }
        match self.settle.outcome().cloned() {
            None => {}
            Some(SettleOutcome::Failed) => {
                let position = self.settle.position();
                self.report = Report::Known(if self.sent_proposal {
                    CommitResult::Unknown { position }
                } else {
                    CommitResult::Aborted
                });
            }
            Some(SettleOutcome::Settled { entry, .. }) => {
                let position = self.settle.position();
                if entry.txn == Some(self.txn) {
                    self.report = Report::Known(CommitResult::Committed {
                        position,
                        fast: self.on_fast_path(),
                    });
                    return;
                }
                let mut keys: BTreeSet<Vec<u8>> = entry
                    .written_rows()
                    .filter(|r| self.reads.covers(r))
                    .map(<[u8]>::to_vec)
                    .collect();
                // A transaction the winner prepared locks rows from now on: a commit
                // that writes what it read or writes, or read what it writes, cannot
                // go after it until it is decided.
                if !ctx.config.bugs.ignore_prepared_on_commit() {
                    // What this entry writes in effect: for a prepare, the rows its
                    // transaction will write.
                    let writes = effective_writes(&self.eg, &self.entry.writes);
                    for prepared in prepared_in(&self.eg, &entry) {
                        keys.extend(
                            prepared.conflicts_with(&self.reads, writes.iter().map(Vec::as_slice)),
                        );
                    }
                }
                if keys.is_empty() && self.rebases < REBASES_MAX {
                    // None of our reads changed: the same entry is still right one
                    // position later.
                    self.rebases += 1;
                    // The next position's leader is named by the chosen entry — never
                    // by our own, which lost (unless the knob says otherwise).
                    let leader = if ctx.config.bugs.leader_from_unchosen_entry() {
                        self.entry.next_leader
                    } else {
                        entry.next_leader
                    };
                    let entry = Some(self.entry.clone());
                    self.settle =
                        Settle::start(ctx, self.eg.clone(), position.next(), entry, leader);
                    self.advance(ctx);
                    return;
                }
                // An earlier position held our value only if it was chosen there; it
                // was not, so nothing of ours is in the log.
                self.report = Report::Known(CommitResult::Conflict {
                    keys: keys.into_iter().collect(),
                });
            }
        }
    }

    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: ReplicaReply,
    ) {
        if self.settle.owns(reply.id()) {
            self.settle.on_replica_reply(ctx, from, reply);
            self.advance(ctx);
        }
    }

    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        self.settle.on_coordinator_reply(ctx, from, reply);
        self.advance(ctx);
    }

    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        if self.settle.owns(id) {
            self.settle.on_lock_outcome(ctx, id, result);
            self.advance(ctx);
        }
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.settle.on_tick(ctx);
        self.advance(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_set_covers_its_rows_and_every_row_of_its_ranges() {
        let reads = ReadSet {
            rows: [b"g\x01a".to_vec()].into(),
            ranges: vec![KeyRange::prefix(b"g\x02".to_vec())],
            prepared: Vec::new(),
        };
        assert!(reads.covers(b"g\x01a"));
        assert!(!reads.covers(b"g\x01b"));
        assert!(
            reads.covers(b"g\x02new-row"),
            "a row inserted into a scanned range"
        );
        assert!(!reads.covers(b"g\x03"));
        assert!(!ReadSet::default().covers(b"g\x01a"));
    }
}
