//! Combining a client's commits to one group (docs/protocol.md, "Combining commits").
//!
//! While one of the client's commits to a group is in flight, its later commits to
//! that group wait in the group's lane instead of racing it for the same position.
//! When the commit ends, the lane knows what was chosen at every position it settled;
//! the waiting transactions are then judged in arrival order:
//! - one whose read is older than that known stretch starts alone, as without a lane
//!   (and the others wait on, so the oldest goes first);
//! - one whose reads a known position wrote (or locked) conflicts at once;
//! - one for which the position after the stretch is past its commit span conflicts
//!   at once too, naming no rows: it was never proposed, so it may run again — except
//!   a two-phase decision, whose span moves on ([`Member::span_moves`]);
//! - the others join one entry at the position after the stretch, each after those
//!   before it only if it read nothing they write (else it waits for the next round,
//!   where it will see their writes as chosen), within the transaction size limit —
//!   except a two-phase step (a prepare, a decision, a finish, a collection's
//!   delete), which goes in an entry of its own: what an entry prepares or finishes is
//!   read from the entry as a whole. The oldest such step goes first, ahead of those
//!   that came before it, unless the last entry held one ([`Lane::two_phase_step_first`]).
//!
//! Each transaction keeps its own id, its own conflict set and its own result: an
//! entry that loses its position drops the transactions whose reads the winner wrote
//! and carries the others to the next position ([`Commit`](crate::proposer::commit)).
//!
//! A blind write (a transaction that read nothing) that arrives while the lane's commit
//! is in flight need not read the group first: it takes a read the lane lends as its
//! own ([`Lane::blind_basis`]) — a position and the prepared transactions pending
//! there — and waits, to be judged against the known stretch like any other. The read
//! lent is the newest of the commit's transactions, carried forward over the known
//! stretch to the position before the commit: the stretch's entries say which records
//! they prepared and which they finished. So blind writes arriving one after another,
//! each on the read lent to the one before, do not keep an old read alive. A
//! two-phase step's read is never lent: its pending set is not exact.
//!
//! When a commit ends, the next entry lingers, for a bounded share of the commit's
//! time, for the commits expected to follow it: its transactions' clients coming back,
//! and the current reads it woke ([`Lane::ended`]). Waiting changes which entry a
//! transaction rides, never its outcome.
//!
//! Invariants: *one commit per lane* — a lane starts a commit only with none in flight
//! (asserted in [`Lane::next`] and [`Lane::started`]); *known is a contiguous stretch of chosen positions* —
//! what a lane learns extends its stretch only where it continues it, and otherwise
//! replaces it.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use megastore_types::limits::TRANSACTION_BYTES_MAX;
use megastore_types::{Ballot, EgId, Position, ReplicaId, Time, TxnId};

use super::OpId;
use crate::bugs::ProtocolBugs;
use crate::entry::write_bytes;
use crate::proposer::commit::{CommitResult, Member, Winner};
use crate::two_phase::{Prepared, record_row, writes_two_phase_rows};

/// Transactions one entry combines at most.
pub(crate) const COMBINED_MAX: usize = 64;

/// Positions a lane remembers what was chosen at (the newest): waiting transactions
/// that read before them start alone.
const KNOWN_MAX: usize = 32;

/// A transaction waiting for its group's lane.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) op: OpId,
    pub(crate) member: Member,
    /// The position it read at.
    pub(crate) read_position: Position,
    /// The leader its read named for the next position.
    pub(crate) leader: Option<ReplicaId>,
}

/// A commit the lane starts.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) position: Position,
    pub(crate) leader: Option<ReplicaId>,
    /// The ballot `position - 1` was chosen at, when this client settled it.
    pub(crate) previous_visible: Option<Ballot>,
    /// Its transactions, in serial order, with the operation each reports to.
    pub(crate) members: Vec<(OpId, Member)>,
}

/// What a blind write commits after, as a read of no rows finds it: a position, the
/// leader its entry named for the next one, and the prepared transactions pending
/// there. Lent by a commit in flight ([`ClientCore::lend_basis`](crate::ClientCore::lend_basis)):
/// where a transaction of that commit read (the newest such read), as it read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basis {
    /// The position.
    pub read_position: Position,
    /// The next position's leader, as the entry at `read_position` named it.
    pub leader: Option<ReplicaId>,
    /// The prepared transactions pending at `read_position`: their locks hold against
    /// a blind write as against any commit after that read.
    pub prepared: Vec<Prepared>,
}

impl Basis {
    /// The basis a read of the group found (its rows aside).
    pub fn of_read(read: &crate::ReadResult) -> Self {
        Self {
            read_position: read.position.unwrap_or(Position::NONE),
            leader: read.next_leader,
            prepared: read.prepared.clone(),
        }
    }

    fn of(waiting: &Waiting) -> Self {
        Self {
            read_position: waiting.read_position,
            leader: waiting.leader,
            prepared: waiting.member.reads.prepared.clone(),
        }
    }

    /// The same read carried forward over `winners`, chosen at the positions right
    /// after it: the records they finished are no longer pending, those they prepared
    /// are.
    fn carried<'w>(
        mut self,
        eg: &EgId,
        winners: impl IntoIterator<Item = &'w Winner>,
        bugs: &ProtocolBugs,
    ) -> Self {
        for winner in winners {
            self.prepared
                .retain(|p| !winner.finished.contains(&record_row(eg, p.txn)));
            let prepared_here = if bugs.carry_skips_prepares() {
                &[][..]
            } else {
                &winner.prepared[..]
            };
            for prepared in prepared_here {
                if !self.prepared.iter().any(|p| p.txn == prepared.txn) {
                    self.prepared.push(prepared.clone());
                }
            }
            self.read_position = self.read_position.next();
            self.leader = winner.next_leader;
        }
        self
    }
}

/// The share of a settled commit's duration its lane lingers for the commits it
/// expects: a quarter (20 ms at 80 ms RTT). An eighth was too short for 64 gRPC
/// clients on two cores to come back with their next transactions.
const LINGER_SHARE: u32 = 4;

/// The longest a lane lingers.
const LINGER_MAX: Duration = Duration::from_millis(40);

/// The commits a lane expects after its commit settled ([`Lane::ended`]), and those
/// that came.
#[derive(Debug)]
struct Round {
    /// Commits that read here or later came after the settle.
    at: Position,
    /// The commits that could come: one per transaction of the ended commit (its
    /// client may come back with the next) and per read it woke.
    owed: usize,
    /// Commits the next entry waits for: `owed` scaled by how many came per one owed
    /// in the round before (the first time: one per read the ended commit woke).
    expected: usize,
    /// Commits that read at `at` or later and came before `until` — whether the
    /// next entry waited for them or had left (having all it expected): those a
    /// linger this long can carry, which tells the next round what to expect.
    arrived: usize,
    /// The linger's end. The lane is kept until then even with nothing waiting, so
    /// that the round counts the commits that come.
    until: Time,
    /// Whether the ended commit won the last position it settled. Only then is the
    /// position after its stretch likely free, so that a blind write lent the read
    /// carried there ([`Lane::blind_basis`]) rides the next entry. A commit that lost
    /// every position it settled (its read was stale, or others raced it) knows
    /// nothing of what follows: a blind write then reads the group itself, which also
    /// catches a replica left behind up.
    lends: bool,
}

/// One group's lane.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    /// The operation of the commit in flight (keyed by its first transaction's op).
    busy: Option<OpId>,
    /// When the commit in flight started.
    busy_since: Time,
    /// What the last commit that settled expects, if one did.
    round: Option<Round>,
    /// The read lent to blind writes: of the last commit started, at the position
    /// before it (with `busy`, the commit in flight's).
    basis: Option<Basis>,
    waiting: VecDeque<Waiting>,
    /// Whether the last entry started held a two-phase step: then the next goes to
    /// the transactions that waited before any other such step.
    two_phase_went_last: bool,
    /// What was chosen at positions `known_from..known_from + known.len()`.
    known_from: Position,
    known: VecDeque<Winner>,
}

impl Lane {
    /// Whether the lane can go: nothing in flight, nothing waiting, and its last
    /// round over at `now`.
    pub(crate) fn idle(&self, now: Time) -> bool {
        self.busy.is_none()
            && self.waiting.is_empty()
            && self.round.as_ref().is_none_or(|r| r.until <= now)
    }

    /// With nothing in flight, when its round ends (at once, with no round): then what
    /// waits may start ([`Lane::lingers`] no longer holds it) or the lane may go
    /// ([`Lane::idle`]). Until then, and while a commit is in flight (`None`), only a
    /// change to the lane or its commit can change what it does.
    pub(crate) fn round_end(&self) -> Option<Time> {
        if self.busy.is_some() {
            return None;
        }
        Some(self.round.as_ref().map_or(Time::ZERO, |r| r.until))
    }

    /// How many transactions wait.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// `waiting` waits, from `now`.
    pub(crate) fn wait(&mut self, waiting: Waiting, now: Time) {
        if let Some(round) = &mut self.round
            && waiting.read_position >= round.at
            && now < round.until
        {
            round.arrived += 1;
        }
        self.waiting.push_back(waiting);
    }

    /// The operation of the commit in flight, if any.
    pub(crate) fn busy(&self) -> Option<OpId> {
        self.busy
    }

    /// Commit `op` (keyed by its first transaction's operation) starts at `now`.
    pub(crate) fn started(&mut self, op: OpId, now: Time) {
        assert!(self.busy.is_none(), "one commit per lane at a time");
        self.busy = Some(op);
        self.busy_since = now;
    }

    /// The commit in flight ended at `now` (docs/protocol.md, "Combining commits",
    /// step 8). If it settled positions through `settled`, the next entry lingers for
    /// the commits expected to follow: its `members` transactions' clients, in a
    /// closed loop, come back with their next ones, and the `woken` current reads
    /// that waited for it with theirs. Of those it expects as many as came in time
    /// per one owed in the round before (the first time, the woken reads' only), and
    /// waits for them at most a quarter of how long the ended commit took (and
    /// [`LINGER_MAX`]), so that they ride the next entry instead of the one after. A
    /// lone writer comes back alone, so it goes as it comes; commits that do not come
    /// in time (read-only transactions, writers gone to other groups, clients too
    /// busy to come back within the linger) teach the next round to expect fewer, and
    /// a linger that carries nobody is not paid again. `won_last` says whether the
    /// commit won its last settled position: only then does the round lend its read
    /// to blind writes.
    pub(crate) fn ended(
        &mut self,
        now: Time,
        settled: Option<Position>,
        won_last: bool,
        (members, woken): (usize, usize),
    ) {
        self.busy = None;
        let Some(at) = settled else {
            self.round = None;
            return;
        };
        let owed = members + woken;
        let expected = match &self.round {
            None => woken,
            // As many as came for each one owed before: `owed * arrived / owed_before`.
            Some(before) => (owed * before.arrived)
                .div_ceil(before.owed.max(1))
                .min(owed),
        }
        .min(COMBINED_MAX);
        let linger = (now.since(self.busy_since) / LINGER_SHARE).min(LINGER_MAX);
        self.round = Some(Round {
            at,
            owed,
            expected,
            arrived: 0,
            until: now + linger,
            lends: won_last,
        });
    }

    /// Whether the next entry waits, at `now`, for commits still expected
    /// ([`Lane::ended`]).
    pub(crate) fn lingers(&self, now: Time) -> bool {
        self.busy.is_none()
            && self
                .round
                .as_ref()
                .is_some_and(|r| now < r.until && r.arrived < r.expected)
    }

    /// When the linger holding waiting commits ends, if one does. (A linger with
    /// nothing waiting needs no wake: a commit that comes starts it.)
    pub(crate) fn linger_deadline(&self) -> Option<Time> {
        if self.busy.is_some() || self.waiting.is_empty() {
            return None;
        }
        self.round
            .as_ref()
            .filter(|r| r.arrived < r.expected)
            .map(|r| r.until)
    }

    /// The read a blind write may take instead of reading the group itself, while a
    /// commit is in flight — or, between two, while the lane lingers or its round
    /// lasts at `now` after a commit that won its last position ([`Lane::ended`]):
    /// then the read lent to the commit that ended, carried over what it settled
    /// (through the known stretch's head), so the write rides the next entry without
    /// a read of its own. Sound because it holds exactly
    /// the locks pending at its position (a current read's, or one lent before,
    /// carried over chosen entries), and a waiting transaction is judged against every
    /// position after its read, locks included — or, if the lane no longer knows them
    /// all, goes alone after its read and rebases.
    pub(crate) fn blind_basis(&self, eg: &EgId, now: Time, bugs: &ProtocolBugs) -> Option<Basis> {
        let mut basis = self.basis.clone()?;
        if self.busy.is_none() {
            let lends = self
                .round
                .as_ref()
                .is_some_and(|r| now < r.until && r.lends);
            if !lends || !self.judges(basis.read_position) {
                return None;
            }
            let skip = (basis.read_position.next().0 - self.known_from.0) as usize;
            basis = basis.carried(eg, self.known.iter().skip(skip), bugs);
        }
        if bugs.blind_write_forgets_locks() {
            basis.prepared.clear();
        }
        Some(basis)
    }

    /// Takes in what a commit learned was chosen from position `first` on.
    pub(crate) fn learned(&mut self, first: Position, winners: &[Winner]) {
        if winners.is_empty() {
            return;
        }
        let end = self.known_from.0 + self.known.len() as u64;
        if self.known.is_empty() || first.0 > end || first < self.known_from {
            self.known_from = first;
            self.known = winners.iter().cloned().collect();
        } else {
            // Overlapping positions were chosen once: keep what is known, add the rest.
            let skip = (end - first.0) as usize;
            self.known.extend(winners.iter().skip(skip).cloned());
        }
        while self.known.len() > KNOWN_MAX {
            self.known.pop_front();
            self.known_from = self.known_from.next();
        }
    }

    /// The last position known chosen, if any.
    fn head(&self) -> Option<Position> {
        let len = self.known.len() as u64;
        (len > 0).then(|| Position(self.known_from.0 + len - 1))
    }

    /// Whether a transaction that read at `read_position` can be judged against the
    /// known stretch: every position after its read, through the head, is known.
    fn judges(&self, read_position: Position) -> bool {
        self.head()
            .is_some_and(|head| read_position.next() >= self.known_from && read_position <= head)
    }

    /// The known position after `read_position` whose entry commits `member`'s
    /// transaction, if any (a transaction relayed twice).
    fn committed_at(&self, member: &Member, read_position: Position) -> Option<Position> {
        let skip = (read_position.next().0 - self.known_from.0) as usize;
        self.known
            .iter()
            .enumerate()
            .skip(skip)
            .find(|(_, winner)| winner.holds(member.txn))
            .map(|(i, _)| Position(self.known_from.0 + i as u64))
    }

    /// Whether `txn` waits here.
    pub(crate) fn has_waiting(&self, txn: TxnId) -> bool {
        self.waiting.iter().any(|w| w.member.txn == txn)
    }

    /// The rows `member` read at `read_position` that a known later position wrote
    /// or locks.
    fn conflicts(
        &self,
        eg: &EgId,
        member: &Member,
        read_position: Position,
        bugs: &ProtocolBugs,
    ) -> BTreeSet<Vec<u8>> {
        let skip = (read_position.next().0 - self.known_from.0) as usize;
        self.known
            .iter()
            .skip(skip)
            .flat_map(|winner| winner.conflicts(eg, member, bugs))
            .collect()
    }

    /// With nothing in flight: the results known at once (conflicts with known
    /// positions) and the next commit to start, if any is waiting.
    pub(crate) fn next(
        &mut self,
        eg: &EgId,
        bugs: &ProtocolBugs,
    ) -> (Vec<(OpId, TxnId, CommitResult)>, Option<Start>) {
        debug_assert!(self.busy.is_none(), "one commit per lane at a time");
        let mut results = Vec::new();
        // Conflicts first: they are final, and may leave an eligible transaction first.
        let next = self.head().map(Position::next);
        let mut kept = VecDeque::new();
        for mut waiting in std::mem::take(&mut self.waiting) {
            let judged = self.judges(waiting.read_position);
            if judged
                && !bugs.relay_commits_duplicates()
                && let Some(at) = self.committed_at(&waiting.member, waiting.read_position)
            {
                // Relayed twice: its first copy is already in the log there.
                results.push((
                    waiting.op,
                    waiting.member.txn,
                    CommitResult::Committed {
                        position: at,
                        fast: false,
                    },
                ));
                continue;
            }
            let past_span = next
                .filter(|next| judged && !bugs.commit_past_span() && *next > waiting.member.last);
            if let Some(next) = past_span {
                if waiting.member.span_moves(eg) {
                    // A decision's span moves on: judged below like any other, and on
                    // to the next entry if nothing known conflicts with it.
                    waiting.member.move_span_to(next);
                } else {
                    // The next entry is past the end of its commit span: it was never
                    // proposed, so it is in the log nowhere and may run again.
                    results.push((
                        waiting.op,
                        waiting.member.txn,
                        CommitResult::Conflict { keys: Vec::new() },
                    ));
                    continue;
                }
            }
            let conflicts = if judged {
                self.conflicts(eg, &waiting.member, waiting.read_position, bugs)
            } else {
                BTreeSet::new()
            };
            if conflicts.is_empty() {
                kept.push_back(waiting);
            } else {
                results.push((
                    waiting.op,
                    waiting.member.txn,
                    CommitResult::Conflict {
                        keys: conflicts.into_iter().collect(),
                    },
                ));
            }
        }
        self.waiting = kept;
        self.two_phase_step_first(eg);
        let Some(first) = self.waiting.front() else {
            return (results, None);
        };
        let Some(head) = self.head().filter(|_| self.judges(first.read_position)) else {
            // The oldest read before what the lane knows: it goes alone, as without one.
            return (results, Some(self.start_first_alone(eg)));
        };
        let (leader, previous_visible) = self
            .known
            .back()
            .map_or((None, None), |w| (w.next_leader, Some(w.ballot)));
        let mut members: Vec<(OpId, Member)> = Vec::new();
        let mut written: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut bytes = 0usize;
        let mut newest_read: Option<Basis> = None;
        let mut kept = VecDeque::new();
        // Whether the entry is closed to more members: it holds a two-phase step.
        let mut closed = false;
        for waiting in std::mem::take(&mut self.waiting) {
            let size = write_bytes(&waiting.member.writes);
            let reads_combined = !bugs.combine_conflicting()
                && written.iter().any(|row| waiting.member.reads.covers(row));
            let fits = members.len() < COMBINED_MAX && bytes + size <= TRANSACTION_BYTES_MAX;
            // A two-phase step (a prepare, a decision, a finish, a collection) goes in
            // an entry of its own (`writes_two_phase_rows`).
            let alone = writes_two_phase_rows(eg, &waiting.member.writes);
            if !self.judges(waiting.read_position)
                || reads_combined
                || !fits
                || closed
                || (alone && !members.is_empty())
            {
                kept.push_back(waiting);
                continue;
            }
            closed = alone;
            if newest_read
                .as_ref()
                .is_none_or(|read| read.read_position < waiting.read_position)
            {
                newest_read = Some(Basis::of(&waiting));
            }
            bytes += size;
            written.extend(waiting.member.writes.iter().map(|w| w.row.clone()));
            members.push((waiting.op, waiting.member));
        }
        self.waiting = kept;
        if members.is_empty() {
            // Even the oldest alone is over the size limit: the replicas will say so.
            return (results, Some(self.start_first_alone(eg)));
        }
        self.basis = newest_read.filter(|_| !closed).map(|read| {
            // Judged, so the stretch holds every position from its read through head.
            let skip = (read.read_position.next().0 - self.known_from.0) as usize;
            read.carried(eg, self.known.iter().skip(skip), bugs)
        });
        self.two_phase_went_last = closed;
        let start = Start {
            position: head.next(),
            leader,
            previous_visible,
            members,
        };
        (results, Some(start))
    }

    /// Moves the oldest judged two-phase step waiting (a prepare, a decision, a
    /// finish, a collection's delete) ahead of the transactions that came before it,
    /// unless the last entry held one: it goes in an entry of its own, so behind them
    /// it would wait a round more, and meanwhile it holds locks — a prepared
    /// transaction's rows in other groups stay locked until its decision and finishes.
    /// Every other entry at most, so neither kind waits for ever behind the other.
    fn two_phase_step_first(&mut self, eg: &EgId) {
        if self.two_phase_went_last {
            return;
        }
        let step = self.waiting.iter().position(|w| {
            self.judges(w.read_position) && writes_two_phase_rows(eg, &w.member.writes)
        });
        if let Some(i) = step.filter(|i| *i > 0)
            && let Some(step) = self.waiting.remove(i)
        {
            self.waiting.push_front(step);
        }
    }

    /// The oldest waiting transaction, alone at the position after its read.
    fn start_first_alone(&mut self, eg: &EgId) -> Start {
        let first = self.waiting.pop_front().expect("a transaction is waiting");
        self.two_phase_went_last = writes_two_phase_rows(eg, &first.member.writes);
        self.basis = lends_its_read(eg, &first).then(|| Basis::of(&first));
        Start {
            position: first.read_position.next(),
            leader: first.leader,
            previous_visible: None,
            members: vec![(first.op, first.member)],
        }
    }
}

/// Whether a read may be lent from `waiting`'s ([`Lane::blind_basis`]): only a read
/// whose pending set is exact at its position. A two-phase step's is not (a finish
/// leaves out its own record, a settle's or a collection's names rows only), so a
/// blind write lent it would miss locks pending there (the simulator's seed 6051: a
/// relay's blind write, lent a settle's read, wrote a row a prepared transaction
/// held).
fn lends_its_read(eg: &EgId, waiting: &Waiting) -> bool {
    !writes_two_phase_rows(eg, &waiting.member.writes)
}

#[cfg(test)]
mod tests {
    use megastore_types::ClientId;

    use super::*;
    use crate::entry::{CellWrite, LogEntry, RowWrite};
    use crate::proposer::commit::ReadSet;

    /// When the tests without a round wait: any time will do.
    const NOW: Time = Time::ZERO;

    fn eg() -> EgId {
        EgId(b"g".to_vec())
    }

    fn txn(seq: u64) -> TxnId {
        TxnId {
            client: ClientId(1),
            seq,
        }
    }

    fn write(row: &str) -> RowWrite {
        RowWrite {
            row: format!("g\x01{row}").into_bytes(),
            cells: vec![CellWrite::Set {
                column: b"v".to_vec(),
                value: b"x".to_vec(),
            }],
        }
    }

    /// Transaction `seq` that read `reads` at `read_position` and writes `writes`.
    fn waiting(seq: u64, read_position: u64, reads: &[&str], writes: &[&str]) -> Waiting {
        Waiting {
            op: OpId(seq),
            member: Member::after_read(
                txn(seq),
                writes.iter().map(|r| write(r)).collect(),
                ReadSet::from(
                    reads
                        .iter()
                        .map(|r| format!("g\x01{r}").into_bytes())
                        .collect::<BTreeSet<_>>(),
                ),
                Position(read_position),
            ),
            read_position: Position(read_position),
            leader: None,
        }
    }

    fn chosen(seq: u64, writes: &[&str]) -> Winner {
        let entry = LogEntry::combining(
            [(txn(seq), writes.iter().map(|r| write(r)).collect())],
            Some(ReplicaId(7)),
        );
        Winner::of(&eg(), &entry, megastore_types::Ballot::ZERO)
    }

    fn members(start: &Start) -> Vec<u64> {
        start.members.iter().map(|(_, m)| m.txn.seq).collect()
    }

    #[test]
    fn without_a_known_stretch_the_oldest_goes_alone_at_its_own_position() {
        let mut lane = Lane::default();
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW);
        lane.wait(waiting(2, 4, &["b"], &["b"]), NOW);
        let (results, start) = lane.next(&eg(), &ProtocolBugs::default());
        let start = start.expect("a commit starts");
        assert!(results.is_empty());
        assert_eq!((start.position, members(&start)), (Position(5), vec![1]));
        assert_eq!(lane.waiting(), 1);
    }

    #[test]
    fn waiting_transactions_conflict_with_known_positions_or_join_one_entry() {
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(100, &["a"])]);
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW); // read what p5 wrote: conflicts
        lane.wait(waiting(2, 4, &["b"], &["b"]), NOW); // joins
        lane.wait(waiting(3, 4, &["b"], &["c"]), NOW); // read what 2 writes: next round
        lane.wait(waiting(4, 5, &[], &["b"]), NOW); // a blind write of 2's row: joins
        let (results, start) = lane.next(&eg(), &ProtocolBugs::default());
        assert_eq!(
            results,
            vec![(
                OpId(1),
                txn(1),
                CommitResult::Conflict {
                    keys: vec![b"g\x01a".to_vec()]
                }
            )]
        );
        let start = start.expect("a commit starts");
        assert_eq!(
            (
                start.position,
                start.leader,
                start.previous_visible,
                members(&start)
            ),
            (
                Position(6),
                Some(ReplicaId(7)),
                Some(megastore_types::Ballot::ZERO),
                vec![2, 4]
            ),
            "at the position after the stretch, through its leader, saying how 5 was chosen"
        );
        assert_eq!(lane.waiting(), 1, "3 waits for the next round");
        // The entry of 2 and 4 is chosen at 6: 3 read b, which 2 wrote.
        lane.learned(Position(6), &[chosen(2, &["b"])]);
        let (results, start) = lane.next(&eg(), &ProtocolBugs::default());
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].1, txn(3));
        assert!(start.is_none());
    }

    #[test]
    fn a_transaction_that_read_before_the_known_stretch_goes_alone_first() {
        let mut lane = Lane::default();
        lane.learned(Position(8), &[chosen(100, &["z"])]);
        lane.wait(waiting(1, 5, &["a"], &["a"]), NOW);
        lane.wait(waiting(2, 7, &["b"], &["b"]), NOW);
        let (results, start) = lane.next(&eg(), &ProtocolBugs::default());
        let start = start.expect("a commit starts");
        assert!(results.is_empty());
        assert_eq!((start.position, members(&start)), (Position(6), vec![1]));
    }

    #[test]
    fn the_knob_combines_a_transaction_with_one_whose_writes_it_read() {
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(100, &["z"])]);
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW);
        lane.wait(waiting(2, 4, &["a"], &["b"]), NOW);
        let mut bugs = ProtocolBugs::default();
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.unwrap()), vec![1]);
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(100, &["z"])]);
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW);
        lane.wait(waiting(2, 4, &["a"], &["b"]), NOW);
        bugs.combine_conflicting = true;
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.unwrap()), vec![1, 2]);
    }

    #[test]
    fn a_two_phase_step_goes_in_an_entry_of_its_own() {
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(100, &["z"])]);
        let prepare = |seq: u64, row: &str| {
            let mut waiting = waiting(seq, 4, &[], &[]);
            waiting.member.writes =
                vec![crate::two_phase::prepare_write(&eg(), &prepared(seq, row), &[]).unwrap()];
            waiting
        };
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW);
        lane.wait(prepare(2, "b"), NOW); // after 1, but goes first
        lane.wait(waiting(3, 4, &["c"], &["c"]), NOW);
        let bugs = ProtocolBugs::default();
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(
            members(&start.unwrap()),
            vec![2],
            "the prepare first, alone, ahead of what came before it"
        );
        lane.busy = Some(OpId(2));
        assert!(
            lane.blind_basis(&eg(), NOW, &bugs).is_none(),
            "a two-phase step's read is lent to no blind write"
        );
        lane.busy = None;
        // Nor when it goes alone after a read older than the known stretch.
        let mut stale = Lane::default();
        stale.learned(Position(5), &[chosen(100, &["z"])]);
        let mut old_prepare = prepare(5, "e");
        old_prepare.read_position = Position(2);
        stale.wait(old_prepare, NOW);
        let (_, start) = stale.next(&eg(), &bugs);
        assert_eq!(start.unwrap().position, Position(3));
        stale.busy = Some(OpId(5));
        assert!(stale.blind_basis(&eg(), NOW, &bugs).is_none());
        // Then the transactions that waited, though another step waits too: every
        // other entry at most goes to a two-phase step.
        lane.learned(Position(6), &[chosen(2, &[])]);
        lane.wait(prepare(4, "d"), NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.unwrap()), vec![1, 3]);
        lane.learned(Position(7), &[chosen(1, &["a", "c"])]);
        lane.wait(waiting(5, 7, &["e"], &["e"]), NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.unwrap()), vec![4], "and then the next step");
        lane.learned(Position(8), &[chosen(4, &[])]);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.unwrap()), vec![5]);
    }

    /// A prepared transaction of `seq` that writes `row`.
    fn prepared(seq: u64, row: &str) -> Prepared {
        Prepared {
            txn: txn(seq),
            coordinator: eg(),
            participants: vec![eg()],
            prepared_ms: 0,
            writes: [format!("g\x01{row}").into_bytes()].into(),
            read_rows: BTreeSet::new(),
            read_ranges: Vec::new(),
        }
    }

    #[test]
    fn a_blind_write_is_lent_the_newest_read_carried_to_the_commit_in_flight() {
        let bugs = ProtocolBugs::default();
        let mut lane = Lane::default();
        assert!(
            lane.blind_basis(&eg(), NOW, &bugs).is_none(),
            "nothing started"
        );
        // Known: 4 prepares transaction 60, 5 finishes 50 (pending when 1 read at 3).
        let prepare = crate::two_phase::prepare_write(&eg(), &prepared(60, "d"), &[]).unwrap();
        let finish = RowWrite {
            row: record_row(&eg(), txn(50)),
            cells: vec![CellWrite::Delete {
                column: b"locks".to_vec(),
            }],
        };
        let entry = |writes: Vec<RowWrite>| {
            let entry = LogEntry::combining([(txn(100), writes)], Some(ReplicaId(7)));
            Winner::of(&eg(), &entry, megastore_types::Ballot::ZERO)
        };
        lane.learned(Position(4), &[entry(vec![prepare]), entry(vec![finish])]);
        let mut first = waiting(1, 3, &["a"], &["a"]);
        first.member.reads.saw_prepared(&[prepared(50, "c")]);
        lane.wait(first, NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(start.expect("a commit starts").position, Position(6));
        assert!(
            lane.blind_basis(&eg(), NOW, &bugs).is_none(),
            "not lent before the commit is in flight (and no round lasts)"
        );
        lane.busy = Some(OpId(1));
        let basis = lane
            .blind_basis(&eg(), NOW, &bugs)
            .expect("lent while in flight");
        assert_eq!(
            (
                basis.read_position,
                basis.leader,
                basis.prepared.iter().map(|p| p.txn).collect::<Vec<_>>()
            ),
            (Position(5), Some(ReplicaId(7)), vec![txn(60)]),
            "carried to the position before the commit: 50 finished, 60 pending"
        );
        let mut forgetful = bugs;
        forgetful.blind_write_forgets_locks = true;
        assert!(
            lane.blind_basis(&eg(), NOW, &forgetful)
                .unwrap()
                .prepared
                .is_empty()
        );
    }

    #[test]
    fn the_newest_read_of_a_commits_transactions_is_lent() {
        let bugs = ProtocolBugs::default();
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(100, &["z"])]);
        lane.wait(waiting(1, 4, &["a"], &["a"]), NOW);
        let mut fresher = waiting(2, 5, &["b"], &["b"]);
        fresher.member.reads.saw_prepared(&[prepared(50, "c")]);
        lane.wait(fresher, NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(members(&start.expect("a commit starts")), vec![1, 2]);
        lane.busy = Some(OpId(1));
        let basis = lane
            .blind_basis(&eg(), NOW, &bugs)
            .expect("lent while in flight");
        assert_eq!(
            (basis.read_position, basis.prepared.len()),
            (Position(5), 1)
        );
    }

    #[test]
    fn a_transaction_whose_span_the_next_entry_is_past_runs_again_unproposed() {
        let bugs = ProtocolBugs::default();
        let mut lane = Lane::default();
        // Known 2..=8: the next entry is at 9.
        let stretch: Vec<Winner> = (0..7).map(|i| chosen(100 + i, &["z"])).collect();
        lane.learned(Position(2), &stretch);
        lane.wait(waiting(1, 3, &["a"], &["a"]), NOW); // first 4, span ends at 8
        lane.wait(waiting(2, 4, &["b"], &["b"]), NOW); // first 5, span ends at 9
        let (results, start) = lane.next(&eg(), &bugs);
        assert_eq!(
            results,
            vec![(OpId(1), txn(1), CommitResult::Conflict { keys: Vec::new() })],
            "never proposed, so retrying it is safe"
        );
        let start = start.expect("a commit starts");
        assert_eq!((start.position, members(&start)), (Position(9), vec![2]));
        let mut past = Lane::default();
        past.learned(Position(2), &stretch);
        past.wait(waiting(1, 3, &["a"], &["a"]), NOW);
        let mut knob = bugs;
        knob.commit_past_span = true;
        let (results, start) = past.next(&eg(), &knob);
        assert!(results.is_empty());
        assert_eq!(
            start.unwrap().position,
            Position(9),
            "the knob starts it anyway"
        );
    }

    /// Transaction `seq`'s decision of commit in `eg()`, after a read at
    /// `read_position` of `reads` and of its decision row.
    fn decision(seq: u64, read_position: u64, reads: &[&str]) -> Waiting {
        let mut waiting = waiting(seq, read_position, reads, &[]);
        let facts = crate::two_phase::TxnFacts {
            prepared_ms: 1,
            participants: vec![eg(), EgId(b"h".to_vec())],
        };
        let decided = crate::two_phase::decision_write(
            &eg(),
            txn(seq),
            crate::two_phase::Decision::Commit,
            &facts,
        );
        waiting.member.reads.rows.insert(decided.row.clone());
        waiting.member.writes.push(decided);
        waiting
    }

    #[test]
    fn a_decision_whose_span_the_next_entry_is_past_moves_on_unless_it_conflicts() {
        let bugs = ProtocolBugs::default();
        let stretch: Vec<Winner> = (0..7).map(|i| chosen(100 + i, &["z"])).collect();
        let mut lane = Lane::default();
        // Known 2..=8: the next entry is at 9, past the span (4..=8) of a read at 3.
        lane.learned(Position(2), &stretch);
        lane.wait(decision(1, 3, &["a"]), NOW);
        let (results, start) = lane.next(&eg(), &bugs);
        assert!(results.is_empty(), "{results:?}");
        let start = start.expect("the decision starts");
        assert_eq!((start.position, members(&start)), (Position(9), vec![1]));
        assert_eq!(start.members[0].1.last, Position(13), "its span moved on");
        // Judged like any other: a known position wrote what it read.
        let mut conflicting = Lane::default();
        conflicting.learned(Position(2), &stretch);
        conflicting.wait(decision(1, 3, &["z"]), NOW);
        let (results, start) = conflicting.next(&eg(), &bugs);
        assert!(start.is_none());
        let keys = vec![b"g\x01z".to_vec()];
        assert_eq!(
            results,
            vec![(OpId(1), txn(1), CommitResult::Conflict { keys })]
        );
        // Only its own decision row moves a span: another transaction's does not.
        let mut other = Lane::default();
        other.learned(Position(2), &stretch);
        let mut foreign = decision(1, 3, &["a"]);
        foreign.member.txn = txn(2);
        other.wait(foreign, NOW);
        let (results, _) = other.next(&eg(), &bugs);
        assert_eq!(
            results,
            vec![(OpId(1), txn(2), CommitResult::Conflict { keys: Vec::new() })]
        );
    }

    /// A commit at `at` that took 80 ms, ended with `members` transactions, woke
    /// `woken` reads; returns when it ended.
    fn round(lane: &mut Lane, now: &mut Time, at: u64, members: usize, woken: usize) -> Time {
        lane.started(OpId(at), *now);
        *now = *now + Duration::from_millis(80);
        lane.ended(*now, Some(Position(at)), true, (members, woken));
        *now
    }

    #[test]
    fn a_lane_lingers_for_its_members_and_woken_reads_as_far_as_they_came_in_time() {
        let ms = Duration::from_millis;
        let mut lane = Lane::default();
        let mut now = Time::ZERO;
        // The first round expects the woken reads' commits only.
        let ended = round(&mut lane, &mut now, 5, 2, 2);
        assert!(lane.lingers(ended), "for the two woken reads' commits");
        lane.wait(waiting(1, 4, &[], &["a"]), ended); // read before: waiting already
        assert_eq!(lane.linger_deadline(), Some(ended + ms(20)));
        lane.wait(waiting(2, 5, &[], &["b"]), ended + ms(5));
        assert!(lane.lingers(ended + ms(5)), "one of the two came");
        assert!(!lane.lingers(ended + ms(20)), "a quarter of 80 ms is up");
        lane.wait(waiting(3, 5, &[], &["c"]), ended + ms(25)); // too late: not counted
        lane.waiting.clear();

        // 1 came in time of the 4 owed (2 members, 2 reads): of 8 now, 2 are expected.
        let ended = round(&mut lane, &mut now, 6, 8, 0);
        assert!(lane.lingers(ended));
        lane.wait(waiting(4, 6, &[], &["d"]), ended);
        lane.wait(waiting(5, 7, &[], &["e"]), ended + ms(1));
        assert!(!lane.lingers(ended + ms(1)), "both came");
        for seq in 6..=9 {
            // After the entry left, within the linger's time: counted.
            lane.wait(waiting(seq, 6, &[], &["f"]), ended + ms(19));
        }
        lane.waiting.clear();

        // 6 of 8 came in time: of 8 now, 6 are expected.
        let ended = round(&mut lane, &mut now, 7, 8, 0);
        for seq in 10..=14 {
            lane.wait(waiting(seq, 7, &[], &["g"]), ended + ms(2));
        }
        assert!(lane.lingers(ended + ms(2)), "5 of 6");
        assert!(!lane.lingers(ended + ms(20)), "none more came this time");
        lane.waiting.clear();
        round(&mut lane, &mut now, 8, 8, 0);
        lane.waiting.clear();
        let ended = round(&mut lane, &mut now, 9, 8, 5);
        assert!(
            !lane.lingers(ended),
            "after a round in which nothing came: no linger"
        );
    }

    #[test]
    fn a_closed_loop_lane_lingers_for_all_its_members_from_its_second_round() {
        let ms = Duration::from_millis;
        let mut lane = Lane::default();
        let mut now = Time::ZERO;
        let ended = round(&mut lane, &mut now, 5, 16, 0);
        assert!(!lane.lingers(ended), "nothing expected yet");
        assert!(!lane.idle(ended), "kept while its round lasts");
        assert!(lane.idle(ended + ms(20)), "dropped after it");
        lane.wait(waiting(1, 5, &[], &["a"]), ended + ms(1));
        assert!(!lane.lingers(ended + ms(1)), "it goes as it comes");
        for seq in 2..=16 {
            lane.wait(waiting(seq, 5, &[], &["a"]), ended + ms(2));
        }
        lane.waiting.clear();

        let ended = round(&mut lane, &mut now, 6, 16, 0);
        assert!(lane.lingers(ended), "all 16 came back in time last time");
        assert_eq!(
            lane.linger_deadline(),
            None,
            "nothing waits: no wake is needed"
        );
        lane.wait(waiting(17, 5, &[], &["b"]), ended); // read before the round
        assert_eq!(lane.linger_deadline(), Some(ended + ms(20)));
        for seq in 18..=32 {
            lane.wait(waiting(seq, 6, &[], &["b"]), ended + ms(3));
        }
        assert!(lane.lingers(ended + ms(3)), "15 of 16");
        lane.wait(waiting(33, 6, &[], &["b"]), ended + ms(4));
        assert!(!lane.lingers(ended + ms(4)), "all 16 came");
        lane.waiting.clear();
        lane.started(OpId(7), ended + ms(4));
        assert_eq!(lane.linger_deadline(), None, "nothing lingers while busy");
        lane.ended(ended + ms(84), None, false, (16, 0));
        assert!(
            !lane.lingers(ended + ms(84)),
            "a commit that settled nothing: no round"
        );
    }

    #[test]
    fn between_two_commits_the_lent_read_is_carried_over_what_the_last_one_settled() {
        let bugs = ProtocolBugs::default();
        let ms = Duration::from_millis;
        let mut lane = Lane::default();
        lane.learned(Position(4), &[chosen(90, &["z"])]);
        lane.wait(waiting(1, 4, &[], &["a"]), NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(start.expect("a commit starts").position, Position(5));
        lane.started(OpId(1), NOW);
        assert_eq!(
            lane.blind_basis(&eg(), NOW, &bugs).map(|b| b.read_position),
            Some(Position(4)),
            "in flight: the read before the commit"
        );
        // The commit settles 5 after 80 ms: its round lasts 20 ms.
        let ended = NOW + ms(80);
        lane.learned(Position(5), &[chosen(1, &["a"])]);
        lane.ended(ended, Some(Position(5)), true, (1, 0));
        let lent = lane.blind_basis(&eg(), ended + ms(19), &bugs);
        assert_eq!(
            lent.map(|b| (b.read_position, b.leader)),
            Some((Position(5), Some(ReplicaId(7)))),
            "carried over position 5, whose entry names the next leader"
        );
        assert!(
            lane.blind_basis(&eg(), ended + ms(20), &bugs).is_none(),
            "the round is over: read the group instead"
        );
    }

    #[test]
    fn a_commit_that_lost_its_last_position_lends_nothing_between_entries() {
        let bugs = ProtocolBugs::default();
        let ms = Duration::from_millis;
        let mut lane = Lane::default();
        // A stale read at 1: its commit loses its whole span, 2 to 5, to others.
        lane.learned(Position(1), &[chosen(90, &["z"])]);
        lane.wait(waiting(1, 1, &[], &["a"]), NOW);
        let (_, start) = lane.next(&eg(), &bugs);
        assert_eq!(start.expect("a commit starts").position, Position(2));
        lane.started(OpId(1), NOW);
        let ended = NOW + ms(8);
        let others: Vec<Winner> = (2..=5).map(|seq| chosen(100 + seq, &["y"])).collect();
        lane.learned(Position(2), &others);
        lane.ended(ended, Some(Position(5)), false, (1, 0));
        assert!(
            lane.blind_basis(&eg(), ended, &bugs).is_none(),
            "what follows position 5 is unknown: read the group instead"
        );
    }

    #[test]
    fn a_small_entry_whose_members_all_came_back_expects_all_of_a_large_one() {
        let ms = Duration::from_millis;
        let mut lane = Lane::default();
        let mut now = Time::ZERO;
        let ended = round(&mut lane, &mut now, 5, 2, 0);
        lane.wait(waiting(1, 5, &[], &["a"]), ended + ms(1));
        lane.wait(waiting(2, 5, &[], &["a"]), ended + ms(1));
        // 14 more had waited behind the small entry: the next one carries 16.
        let ended = round(&mut lane, &mut now, 6, 16, 0);
        for seq in 3..=4 {
            lane.wait(waiting(seq, 6, &[], &["b"]), ended + ms(1));
        }
        assert!(
            lane.lingers(ended + ms(1)),
            "each member came back last time: 16 are expected, not the 2 that came"
        );
    }

    #[test]
    fn learning_extends_the_stretch_and_keeps_only_the_newest() {
        let mut lane = Lane::default();
        lane.learned(Position(5), &[chosen(1, &["a"]), chosen(2, &["b"])]);
        // Overlapping: position 6 again, then 7.
        lane.learned(Position(6), &[chosen(2, &["b"]), chosen(3, &["c"])]);
        assert_eq!(
            (lane.known_from, lane.head()),
            (Position(5), Some(Position(7)))
        );
        // A gap: starts over.
        lane.learned(Position(20), &[chosen(4, &["d"])]);
        assert_eq!(
            (lane.known_from, lane.head()),
            (Position(20), Some(Position(20)))
        );
        let many: Vec<Winner> = (0..40).map(|i| chosen(i, &["e"])).collect();
        lane.learned(Position(21), &many);
        assert_eq!(lane.known.len(), KNOWN_MAX);
        assert_eq!(lane.head(), Some(Position(60)));
    }
}
