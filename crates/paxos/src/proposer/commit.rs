//! Committing a log entry of one or more transactions at a position (docs/protocol.md
//! "Write" and "Combining commits"; paper §4.6.3, Figure 8).
//!
//! Each transaction read the group at or below `position - 1`, and nothing chosen
//! between its read and `position` wrote what it read. If another value wins the
//! position, each transaction whose reads the winner wrote (or locked) conflicts; the
//! others are proposed again at the next position (a rebase), which stays
//! serializable: their reads are still current there.

use std::collections::BTreeSet;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::{LockError, LockReply};
use megastore_rowstore::KeyRange;
use megastore_types::{Ballot, EgId, Position, ReplicaId, Time, TxnId};

use super::Ctx;
use super::settle::{Settle, SettleOutcome};
use crate::bugs::ProtocolBugs;
use crate::entry::{LogEntry, RowWrite};
use crate::messages::ReplicaReply;
use crate::two_phase::{Prepared, decision_row, effective_writes, finished_in, prepared_in};

/// Rebases before a commit reports a conflict (with no conflicting keys: a retry is
/// safe).
const REBASES_MAX: u32 = 4;

/// Rebases before an entry whose every open transaction is a two-phase decision
/// ([`Member::span_moves`]) reports a conflict: its span moves on with it, so only
/// this bounds how long it chases a hot group's positions.
const DECISION_REBASES_MAX: u32 = 8 * REBASES_MAX;

/// How many positions past its first a transaction may be proposed at: one that read
/// at `r` goes only to `r + 1 ..= r + 1 + COMMIT_SPAN` (invariant *commit-span*). So
/// whoever knows only its first position can still resolve it — settle each of those
/// positions ([`commit_span`]) — even while its writer, out of reach, is still trying.
pub const COMMIT_SPAN: u64 = REBASES_MAX as u64;

/// The positions a transaction whose first position is `first` may ever be proposed
/// at.
pub fn commit_span(first: Position) -> std::ops::RangeInclusive<Position> {
    first..=Position(first.0.saturating_add(COMMIT_SPAN))
}

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
    /// Like `Unknown`, but it may hold any position of its commit span from `first`
    /// ([`commit_span`]): a relayed commit whose relay did not answer, and whose
    /// resolution from `first` could not decide it. Resolve it from `first`
    /// ([`crate::ClientCore::resolve_from_first`]), never at `first` alone.
    UnknownInSpan {
        /// Its first position (the one after its read).
        first: Position,
    },
    /// Nothing was sent that could be chosen: not committed, retry is safe.
    Aborted,
}

/// One transaction of a commit: what it writes, and what it read.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) txn: TxnId,
    pub(crate) writes: Vec<RowWrite>,
    pub(crate) reads: ReadSet,
    /// The last position it may be proposed at: the end of its [`commit_span`].
    pub(crate) last: Position,
}

impl Member {
    /// Whether its commit span may move on with it (invariant *commit-span*'s one
    /// exception): a two-phase decision of commit, which writes its own transaction's
    /// decision row in `eg` and read that row. Its outcome is that row's, not a find in
    /// its span: the only other writer of the row records abort after reading it
    /// absent, and the two conflict on it, so whichever lands first decides and the
    /// other fails (docs/protocol.md, "The commit span"). Such a commit judged free of
    /// conflicts through the position before `next` may go on to `next` however far
    /// its read is behind: at a hot coordinator group, the prepares' round trip alone
    /// outlasts the span, and the transaction would lose its position every attempt.
    pub(crate) fn span_moves(&self, eg: &EgId) -> bool {
        let row = decision_row(eg, self.txn);
        self.reads.rows.contains(&row) && self.writes.iter().any(|w| w.row == row)
    }

    /// Moves the end of its span to `next`'s (only where [`span_moves`](Self::span_moves)).
    pub(crate) fn move_span_to(&mut self, next: Position) {
        self.last = self.last.max(*commit_span(next).end());
    }

    /// Transaction `txn` that read at `read_position`.
    pub(crate) fn after_read(
        txn: TxnId,
        writes: Vec<RowWrite>,
        reads: ReadSet,
        read_position: Position,
    ) -> Self {
        Self {
            txn,
            writes,
            reads,
            last: *commit_span(read_position.next()).end(),
        }
    }
}

/// What a chosen entry means to a transaction that read before it: the rows it
/// wrote, the cross-group transactions it prepared (whose locks hold from there on),
/// the leader it named for the next position, and the ballot it was chosen at (by a
/// settle of this proposer, which sent its visible marks).
#[derive(Debug, Clone)]
pub(crate) struct Winner {
    rows: BTreeSet<Vec<u8>>,
    /// The transactions it prepared (records it wrote).
    pub(crate) prepared: Vec<Prepared>,
    /// The prepared records it finished (deleted), by row.
    pub(crate) finished: Vec<Vec<u8>>,
    pub(crate) next_leader: Option<ReplicaId>,
    pub(crate) ballot: Ballot,
    /// The transactions it commits.
    txns: Vec<TxnId>,
}

impl Winner {
    pub(crate) fn of(eg: &EgId, entry: &LogEntry, ballot: Ballot) -> Self {
        Self {
            txns: entry.transactions().into_iter().map(|(t, _)| t).collect(),
            rows: entry.written_rows().map(<[u8]>::to_vec).collect(),
            prepared: prepared_in(eg, entry),
            finished: finished_in(eg, entry)
                .into_iter()
                .map(|(row, _)| row)
                .collect(),
            next_leader: entry.next_leader,
            ballot,
        }
    }

    /// Whether the entry commits `txn` (a transaction relayed twice may meet its own
    /// first copy).
    pub(crate) fn holds(&self, txn: TxnId) -> bool {
        self.txns.contains(&txn)
    }

    /// The rows `member` read that this entry wrote, or that a transaction it
    /// prepared locks against `member`: empty if `member` may still commit after it.
    pub(crate) fn conflicts(
        &self,
        eg: &EgId,
        member: &Member,
        bugs: &ProtocolBugs,
    ) -> BTreeSet<Vec<u8>> {
        let mut keys: BTreeSet<Vec<u8>> = self
            .rows
            .iter()
            .filter(|r| member.reads.covers(r))
            .cloned()
            .collect();
        // A transaction the winner prepared locks rows from now on: a commit that
        // writes what it read or writes, or read what it writes, cannot go after it
        // until it is decided.
        if !bugs.ignore_prepared_on_commit() && !self.prepared.is_empty() {
            // What the member writes in effect: for a prepare, the rows its
            // transaction will write.
            let writes = effective_writes(eg, &member.writes);
            for prepared in &self.prepared {
                keys.extend(
                    prepared.conflicts_with(&member.reads, writes.iter().map(Vec::as_slice)),
                );
            }
        }
        keys
    }
}

/// A commit in progress.
#[derive(Debug)]
pub(crate) struct Commit {
    eg: EgId,
    /// Its transactions, in serial order; those with a known result are out of it.
    members: Vec<Member>,
    /// Each member's result.
    reports: Vec<Report>,
    /// The leader its entries name for the position after theirs.
    next_leader: Option<ReplicaId>,
    entry: LogEntry,
    settle: Settle,
    rebases: u32,
    sent_proposal: bool,
    /// The first position it proposed at, and what was chosen at each position from
    /// there on, as far as it learned.
    first: Position,
    seen: Vec<Winner>,
    /// Another client's entry was chosen at a position it proposed at, or its grant.
    lost_a_position: bool,
}

/// Where a member's result stands. A result is reported once; the commit then lives
/// on only while its settle still has work (with the acknowledge-early knob, which
/// reports as soon as the value is chosen).
#[derive(Debug)]
enum Report {
    NotYetKnown,
    Known(CommitResult),
    Reported,
}

impl Commit {
    /// Proposes an entry of `members` (in this order) at `position`, through
    /// `leader`'s fast path if there is one; the entry names `next_leader` for the
    /// position after. `previous_visible`: this proposer settled `position - 1`
    /// itself, chosen at that ballot.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        position: Position,
        (leader, previous_visible): (Option<ReplicaId>, Option<Ballot>),
        members: Vec<Member>,
        next_leader: Option<ReplicaId>,
    ) -> Self {
        assert!(
            ctx.config.bugs.commit_past_span() || members.iter().all(|m| position <= m.last),
            "commit-span: a transaction proposed past the end of its span"
        );
        let entry = LogEntry::combining(
            members.iter().map(|m| (m.txn, m.writes.clone())),
            next_leader,
        );
        let settle = Settle::start_after(
            ctx,
            eg.clone(),
            position,
            Some(entry.clone()),
            leader,
            previous_visible,
        );
        let reports = members.iter().map(|_| Report::NotYetKnown).collect();
        let mut commit = Commit {
            eg,
            members,
            reports,
            next_leader,
            entry,
            settle,
            rebases: 0,
            sent_proposal: false,
            first: position,
            seen: Vec::new(),
            lost_a_position: false,
        };
        commit.advance(ctx);
        commit
    }

    /// Whether the commit has stayed on the fast path so far.
    fn on_fast_path(&self) -> bool {
        self.rebases == 0 && self.settle.later_rounds() == 0
    }

    /// Whether another client's entry was chosen at a position it proposed at, or the
    /// position leader granted one to another client's transaction, or granted this
    /// commit while refusing another client: its group is contended (`client::relay`). A no-op (a sweep's, a resolver's), an entry of its
    /// own client's, or a prepare round alone (no leader yet, a replica down) is not.
    pub(crate) fn lost_a_race(&self) -> bool {
        self.lost_a_position
    }

    /// Its group.
    pub(crate) fn group(&self) -> &EgId {
        &self.eg
    }

    /// The results known and not yet taken, by transaction.
    pub(crate) fn take_results(&mut self) -> Vec<(TxnId, CommitResult)> {
        let mut results = Vec::new();
        for (member, report) in self.members.iter().zip(&mut self.reports) {
            if matches!(report, Report::Known(_))
                && let Report::Known(result) = std::mem::replace(report, Report::Reported)
            {
                results.push((member.txn, result));
            }
        }
        results
    }

    /// Whether a member's result is known and not yet taken.
    #[cfg(debug_assertions)]
    pub(crate) fn has_results(&self) -> bool {
        self.reports.iter().any(|r| matches!(r, Report::Known(_)))
    }

    /// Whether every member's result is known (the settle may still have work).
    pub(crate) fn decided(&self) -> bool {
        !self
            .reports
            .iter()
            .any(|r| matches!(r, Report::NotYetKnown))
    }

    /// Whether nothing is left to do (results reported and settling finished).
    pub(crate) fn finished(&self) -> bool {
        self.reports.iter().all(|r| matches!(r, Report::Reported))
            && self.settle.outcome().is_some()
    }

    /// What it learned was chosen, position by position from the first it proposed
    /// at: the log's stretch a proposer combining later transactions may rely on.
    pub(crate) fn seen(&self) -> (Position, &[Winner]) {
        (self.first, &self.seen)
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        self.settle.deadline()
    }

    /// Rebases it may make: more while each open member is a decision whose span
    /// moves on ([`Member::span_moves`]).
    fn rebases_max(&self) -> u32 {
        let mut open = self
            .members
            .iter()
            .zip(&self.reports)
            .filter(|(_, r)| matches!(r, Report::NotYetKnown));
        match open.all(|(m, _)| m.span_moves(&self.eg)) {
            true => DECISION_REBASES_MAX,
            false => REBASES_MAX,
        }
    }

    /// Sets the result of every member still without one.
    fn report_open(&mut self, result: impl Fn(&Member) -> CommitResult) {
        for (member, report) in self.members.iter().zip(&mut self.reports) {
            if matches!(report, Report::NotYetKnown) {
                *report = Report::Known(result(member));
            }
        }
    }

    fn advance<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.sent_proposal |= self.settle.sent_proposal();
        if self.decided() {
            return;
        }
        let position = self.settle.position();
        let fast = self.on_fast_path();
        if ctx.config.bugs.ack_before_invalidate()
            && let Some((_, chosen)) = self.settle.chosen()
            && self.members.iter().any(|m| chosen.holds(m.txn))
        {
            self.report_open(|_| CommitResult::Committed { position, fast });
            return;
        }
        match self.settle.outcome().cloned() {
            None => {}
            Some(SettleOutcome::Failed) => {
                let sent = self.sent_proposal;
                self.report_open(|_| {
                    if sent {
                        CommitResult::Unknown { position }
                    } else {
                        CommitResult::Aborted
                    }
                });
            }
            Some(SettleOutcome::Settled { entry, ballot }) => {
                let winner = Winner::of(&self.eg, &entry, ballot);
                // The chosen value is our entry (one value per position), so all of
                // its transactions committed.
                let open =
                    |(m, r): (&Member, &Report)| matches!(r, Report::NotYetKnown).then_some(m.txn);
                let mut open_txns = self.members.iter().zip(&self.reports).filter_map(open);
                if open_txns.all(|txn| entry.holds(txn)) {
                    self.seen.push(winner);
                    self.report_open(|_| CommitResult::Committed { position, fast });
                    return;
                }
                // Another entry, which may still hold one of ours: a transaction relayed
                // twice, whose first copy it is. That one is committed there.
                let duplicates = !ctx.config.bugs.relay_commits_duplicates();
                for (member, report) in self.members.iter().zip(&mut self.reports) {
                    if duplicates
                        && matches!(report, Report::NotYetKnown)
                        && entry.holds(member.txn)
                    {
                        *report = Report::Known(CommitResult::Committed {
                            position,
                            fast: false,
                        });
                    }
                }
                // An earlier position held our value only if it was chosen there; it
                // was not, so nothing of ours is in the log. Whose reads it wrote
                // conflicts; the others may go after it.
                // Another client's (not a no-op of a sweep or a resolver, nor an entry
                // of this client's own that its read was older than).
                self.lost_a_position |= entry
                    .txn
                    .is_some_and(|t| self.members.iter().all(|m| m.txn.client != t.client));
                let bugs = ctx.config.bugs;
                for (member, report) in self.members.iter().zip(&mut self.reports) {
                    if matches!(report, Report::NotYetKnown) {
                        let keys = winner.conflicts(&self.eg, member, &bugs);
                        if !keys.is_empty() {
                            *report = Report::Known(CommitResult::Conflict {
                                keys: keys.into_iter().collect(),
                            });
                        }
                    }
                }
                // The next position's leader is named by the chosen entry — never by
                // our own, which lost (unless the knob says otherwise).
                let leader = if bugs.leader_from_unchosen_entry() {
                    self.entry.next_leader
                } else {
                    winner.next_leader
                };
                self.seen.push(winner);
                if self.decided() {
                    return;
                }
                if self.rebases >= self.rebases_max() {
                    self.report_open(|_| CommitResult::Conflict { keys: Vec::new() });
                    return;
                }
                // Members at the end of their span stop here: they lost every position
                // they were proposed at, so they are in the log nowhere. A decision's
                // span moves on instead: the winner did not conflict with it.
                let next = position.next();
                let past_span = !bugs.commit_past_span();
                for (member, report) in self.members.iter_mut().zip(&mut self.reports) {
                    if past_span && matches!(report, Report::NotYetKnown) && member.last < next {
                        if member.span_moves(&self.eg) {
                            member.move_span_to(next);
                        } else {
                            *report = Report::Known(CommitResult::Conflict { keys: Vec::new() });
                        }
                    }
                }
                if self.decided() {
                    return;
                }
                // None of the others' reads changed: their writes are still right one
                // position later.
                self.rebases += 1;
                self.entry = LogEntry::combining(
                    self.members
                        .iter()
                        .zip(&self.reports)
                        .filter(|(_, r)| matches!(r, Report::NotYetKnown))
                        .map(|(m, _)| (m.txn, m.writes.clone())),
                    self.next_leader,
                );
                let entry = Some(self.entry.clone());
                self.settle = Settle::start_after(
                    ctx,
                    self.eg.clone(),
                    position.next(),
                    entry,
                    leader,
                    Some(ballot),
                );
                self.advance(ctx);
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
            // The leader granted the position to another client's transaction, or to
            // this one while refusing another client's: without relaying, the writer
            // that learns each position first would win every grant.
            let taken_by = self.settle.grant_taken_by();
            self.lost_a_position |= self.settle.grant_contended()
                || taken_by.is_some_and(|t| self.members.iter().all(|m| m.txn.client != t.client));
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
