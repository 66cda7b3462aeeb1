//! One entity group's acceptor state at one replica, and the handlers that change it.
//! Every change is expressed as a root-row mutation the driver persists (synced)
//! before any reply that depends on it leaves.

mod global;
mod install;
mod locks;

use std::collections::{BTreeMap, BTreeSet};

use megastore_rowstore::{Durability, RowMutation};
use megastore_types::{Ballot, ClientId, EgId, Position, ReplicaId, ReplicaKind, TxnId};

pub use install::GroupSnapshot;
use locks::PreparedRecords;

use self::global::{global_copies, global_rows_of};
use super::Output;
use crate::bugs::ProtocolBugs;
use crate::cells::{
    APPLIED, COLLECTED, REJOIN_FLOOR, RootRowWrite, SlotRecord, StoredGroup, TRUNCATED, VISIBLE,
};
use crate::entry::{LogEntry, root_row};
use crate::messages::{AcceptResult, ChosenTxn, GrantRefusal, LogState, PrepareResult};

/// How many truncated positions a group remembers the chosen transaction of: enough
/// for a writer that lost touch during its commit to resolve it by transaction id
/// after the log moved on (seconds of a busy group, minutes of a quiet one), at 16
/// bytes each.
pub const CHOSEN_REMEMBERED: usize = 64;

/// How many positions of data history a group keeps below its truncation point, by
/// default: reads at older positions are refused (a current read asks for the position
/// it has just found, so only a read delayed past hundreds of commits would), and the
/// versions only they could see are garbage-collected. Collection runs once
/// the floor can rise by a quarter of this (each pass reads the group's data rows).
pub const HISTORY_KEPT: u64 = 256;

/// A phase-2 request: `entry` at `position` and `ballot`; with `grant`, a request for the
/// position leader's ballot-0 grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The position.
    pub position: Position,
    /// The ballot.
    pub ballot: Ballot,
    /// The value.
    pub entry: LogEntry,
    /// Ask for the ballot-0 grant.
    pub grant: bool,
}

/// Whether a replica may vote on a group: the **rejoin** rule (docs/protocol.md). A replica
/// that lost its store forgot its promises, accepts and grants; voting again where it
/// may have voted before could choose a second value. Before its wipe it can have voted
/// only at positions some other member of that quorum also holds, so once a majority of
/// the other voters reported their highest position `H` it votes above `H` — and grants
/// ballot 0 only above `H + 1`, the one position where a grant can precede every other
/// replica's record of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejoin {
    /// Never wiped: votes everywhere.
    Member,
    /// Wiped, and not yet told how far the voters got: votes nowhere and reports no log
    /// state (a majority read must not count it).
    Uncleared,
    /// Wiped and cleared: votes only above `floor`.
    Cleared {
        /// The highest position a majority of the other voters held.
        floor: Position,
    },
}

/// The acceptor state of one entity group at one replica: what its root row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLog {
    eg: EgId,
    root_row: Vec<u8>,
    promises: BTreeMap<Position, Ballot>,
    /// Boxed: a map allocates its nodes whole (eleven entries each), and most loaded
    /// groups hold one or two slots — a node of boxes is a tenth the size of a node of
    /// records (docs/performance.md, "A replica's memory per group").
    slots: BTreeMap<Position, Box<SlotRecord>>,
    /// The ballot-0 grants given here, in memory only: a grant is durable as the slot
    /// written in its step (the one value ballot 0 admits at that position, invariant
    /// *ballot-zero-once*), so after a restart another transaction's grant request
    /// meets that slot and is refused, and the same transaction's is judged again.
    /// Kept to answer a repeated request without a write.
    grants: BTreeMap<Position, TxnId>,
    /// The last position at which this replica, as position leader, refused a grant
    /// because another transaction held it, and the refused transaction's client. Not
    /// stored: it only tells the next grantee the group is contended (liveness).
    grant_refused: Option<(Position, ClientId)>,
    /// Whose entry was chosen at the last [`CHOSEN_REMEMBERED`] truncated positions.
    chosen: BTreeMap<Position, ChosenTxn>,
    visible: Position,
    applied: Position,
    truncated: Position,
    installed: Position,
    /// Data versions only reads below this could see are gone.
    collected: Position,
    rejoin: Rejoin,
    /// The prepared records (two-phase commit's locks) held here, kept from every data
    /// write this replica makes (*locks-known*).
    prepared: PreparedRecords,
}

impl GroupLog {
    /// The state read back from the root row, and `prepared`, the record rows whose
    /// locks column is live in the store ([`crate::two_phase::records_range`], at the
    /// latest state). With the `forget-promise-on-restart` knob the promises are
    /// dropped, as a replica that never persisted them would. `rejoining`: this
    /// replica lost its store, so a group it has not cleared yet gets no vote.
    pub fn load(
        eg: EgId,
        stored: StoredGroup,
        prepared: Vec<Vec<u8>>,
        bugs: &ProtocolBugs,
        rejoining: bool,
    ) -> Self {
        let root_row = root_row(&eg);
        let promises = if bugs.forget_promise_on_restart() {
            BTreeMap::new()
        } else {
            stored.promises.into_iter().collect()
        };
        Self {
            eg,
            root_row,
            promises,
            slots: stored
                .slots
                .into_iter()
                .map(|(p, slot)| (p, Box::new(slot)))
                .collect(),
            // A row of the layout before grants lived in memory: its grants are held,
            // and its cells deleted (`rewrite_older_layout`).
            grants: stored.grants.into_iter().collect(),
            grant_refused: None,
            chosen: stored.chosen.into_iter().collect(),
            visible: stored.visible,
            applied: stored.applied,
            truncated: stored.truncated,
            installed: stored.installed,
            collected: stored.collected,
            prepared: PreparedRecords::loaded(
                prepared,
                stored.applied,
                bugs.finish_frees_every_lock(),
            ),
            rejoin: match (stored.rejoin_floor, rejoining) {
                (Some(floor), _) => Rejoin::Cleared { floor },
                (None, true) => Rejoin::Uncleared,
                (None, false) => Rejoin::Member,
            },
        }
    }

    /// Whether the group has work left here: a position held above `visible` (in
    /// flight, abandoned, or visible past a gap), or a visible one not applied yet (not
    /// on a witness, which applies nothing). A group with none is *quiescent*: its
    /// root row says all there is, and it may leave memory.
    pub fn unfinished(&self, kind: ReplicaKind) -> bool {
        self.slots.range(self.visible.next()..).next().is_some()
            || (kind != ReplicaKind::Witness && self.applied < self.visible)
    }

    /// Whether this replica votes on the group, and from where.
    pub fn rejoin(&self) -> Rejoin {
        self.rejoin
    }

    /// Whether this replica may promise or accept at `p`.
    pub fn votes_at(&self, p: Position) -> bool {
        match self.rejoin {
            Rejoin::Member => true,
            Rejoin::Uncleared => false,
            Rejoin::Cleared { floor } => p > floor,
        }
    }

    /// Whether this replica may grant ballot 0 at `p` (if it is the position leader).
    fn grants_at(&self, p: Position) -> bool {
        match self.rejoin {
            Rejoin::Member => true,
            Rejoin::Uncleared => false,
            Rejoin::Cleared { floor } => p > floor.next(),
        }
    }

    /// The oldest position a read may ask for: no history below it here (installed
    /// from a snapshot above it, or garbage-collected).
    pub fn history_from(&self) -> Position {
        self.installed.max(self.collected)
    }

    /// The group was installed from a snapshot at this position (reads below it are
    /// refused); `Position::NONE` if never.
    pub fn installed(&self) -> Position {
        self.installed
    }

    /// A majority of the other voters held nothing above `floor`: vote above it from
    /// now on. Only for an uncleared group.
    pub fn clear(&mut self, floor: Position, out: &mut Vec<Output>) {
        if self.rejoin != Rejoin::Uncleared {
            return;
        }
        self.rejoin = Rejoin::Cleared { floor };
        out.push(Output::Persist {
            mutation: self.write().watermark(REJOIN_FLOOR, floor).0,
        });
    }

    /// The group.
    pub fn eg(&self) -> &EgId {
        &self.eg
    }

    /// What is held at `p`.
    pub fn slot(&self, p: Position) -> Option<&SlotRecord> {
        self.slots.get(&p).map(Box::as_ref)
    }

    /// Whether this replica lacks positions it knows were chosen: the one after its
    /// visible watermark is not held at all while a slot above it was marked visible
    /// (it missed the accepts — it was down, or they were lost). Only a catch-up fills
    /// them; nothing of this replica's is in flight there.
    pub fn lacks_chosen_positions(&self) -> bool {
        !self.slots.contains_key(&self.visible.next())
            && self
                .slots
                .range(self.visible.next()..)
                .any(|(_, s)| s.visible)
    }

    /// Every held position.
    pub fn slots(&self) -> impl Iterator<Item = (Position, &SlotRecord)> + '_ {
        self.slots.iter().map(|(p, s)| (*p, s.as_ref()))
    }

    /// The promise at `p`.
    pub fn promise(&self, p: Position) -> Option<Ballot> {
        self.promises.get(&p).copied()
    }

    /// Every position up to this one is visible here.
    pub fn visible(&self) -> Position {
        self.visible
    }

    /// Every position up to this one is applied here.
    pub fn applied(&self) -> Position {
        self.applied
    }

    /// Positions up to this one are truncated here.
    pub fn truncated(&self) -> Position {
        self.truncated
    }

    /// The replica's positions.
    pub fn log_state(&self) -> LogState {
        let last = |keys: Option<&Position>| keys.copied().unwrap_or(Position::NONE);
        let floor = match self.rejoin {
            Rejoin::Cleared { floor } => floor,
            Rejoin::Member | Rejoin::Uncleared => Position::NONE,
        };
        let highest = last(self.slots.keys().next_back())
            .max(last(self.promises.keys().next_back()))
            .max(last(self.grants.keys().next_back()))
            .max(self.visible)
            .max(floor);
        let next_leader = self
            .slots
            .get(&self.visible)
            .filter(|s| s.visible)
            .and_then(|s| s.entry.next_leader);
        LogState {
            highest,
            visible: self.visible,
            applied: self.applied,
            truncated: self.truncated,
            next_leader,
        }
    }

    fn write(&self) -> RootRowWrite {
        RootRowWrite::new(self.root_row.clone())
    }

    /// Paxos phase 1.
    pub fn prepare(&mut self, p: Position, ballot: Ballot, out: &mut Vec<Output>) -> PrepareResult {
        if p <= self.truncated {
            return PrepareResult::Truncated;
        }
        let slot = self.slots.get(&p);
        if let Some(s) = slot.filter(|s| s.visible) {
            return PrepareResult::Visible(s.ballot, s.entry.clone());
        }
        let bar = self.promises.get(&p).copied().max(slot.map(|s| s.ballot));
        if ballot.is_zero() || bar.is_some_and(|bar| ballot <= bar) {
            return PrepareResult::Rejected {
                promised: bar.unwrap_or(Ballot::ZERO),
            };
        }
        let accepted = slot.map(|s| (s.ballot, s.entry.clone()));
        self.promises.insert(p, ballot);
        out.push(Output::Persist {
            mutation: self.write().promise(p, ballot).0,
        });
        PrepareResult::Promised(accepted)
    }

    /// Paxos phase 2, including the position leader's ballot-0 grant.
    pub fn accept(
        &mut self,
        me: ReplicaId,
        bugs: &ProtocolBugs,
        proposal: Proposal,
        out: &mut Vec<Output>,
    ) -> AcceptResult {
        let Proposal {
            position: p,
            ballot,
            entry,
            grant,
        } = proposal;
        if p <= self.truncated {
            return AcceptResult::Truncated;
        }
        // Already decided: tell the proposer what is visible (a late or repeated request
        // must not restart anything, least of all the ballot-0 fast path).
        if let Some(s) = self.slots.get(&p).filter(|s| s.visible) {
            return AcceptResult::Visible(s.ballot, s.entry.clone());
        }
        if let Some(promised) = self
            .promises
            .get(&p)
            .copied()
            .filter(|promised| ballot < *promised)
        {
            return AcceptResult::Rejected { promised };
        }
        if !ballot.is_zero() {
            let promise = self
                .promises
                .get(&p)
                .copied()
                .map_or(ballot, |old| old.max(ballot));
            self.promises.insert(p, promise);
            let slot = SlotRecord {
                ballot,
                entry,
                visible: false,
            };
            let write = if bugs.accept_persists_no_promise() {
                self.write()
            } else {
                self.write().promise(p, promise)
            };
            out.push(Output::Persist {
                mutation: write.slot(p, &slot).0,
            });
            self.slots.insert(p, Box::new(slot));
            return AcceptResult::Accepted;
        }
        // Ballot 0: one value per position, and only the leader's grant admits it.
        if let Some(s) = self.slots.get(&p) {
            if !s.ballot.is_zero() {
                return AcceptResult::Rejected { promised: s.ballot };
            }
            let overwrite = grant && bugs.grant_ballot0_twice();
            if s.entry != entry && !overwrite {
                return match (grant, s.entry.txn) {
                    (true, Some(txn)) => {
                        self.note_grant_refused(p, entry.txn);
                        AcceptResult::GrantRefused(GrantRefusal::Taken(txn))
                    }
                    _ => AcceptResult::Rejected {
                        promised: Ballot::ZERO,
                    },
                };
            }
            if s.entry == entry && (!grant || self.grants.get(&p) == entry.txn.as_ref()) {
                return AcceptResult::Accepted;
            }
        }
        let mut contended = false;
        if grant {
            let Some(txn) = entry.txn else {
                return AcceptResult::GrantRefused(GrantRefusal::NotLeader);
            };
            if !self.grants_at(p) || !self.is_position_leader(me, bugs, p) {
                return AcceptResult::GrantRefused(GrantRefusal::NotLeader);
            }
            if let Some(taken) = self
                .grants
                .get(&p)
                .copied()
                .filter(|t| *t != txn && !bugs.grant_ballot0_twice())
            {
                self.note_grant_refused(p, Some(txn));
                return AcceptResult::GrantRefused(GrantRefusal::Taken(taken));
            }
            self.grants.insert(p, txn);
            contended = self
                .grant_refused
                .is_some_and(|(at, client)| at.next() >= p && client != txn.client);
        }
        let slot = SlotRecord {
            ballot: Ballot::ZERO,
            entry,
            visible: false,
        };
        // The grant is durable as this slot (`grants`).
        out.push(Output::Persist {
            mutation: self.write().slot(p, &slot).0,
        });
        self.slots.insert(p, Box::new(slot));
        if contended {
            AcceptResult::GrantedContended
        } else {
            AcceptResult::Accepted
        }
    }

    /// A grant request for `p` by `txn` was refused: another transaction holds `p`.
    fn note_grant_refused(&mut self, p: Position, txn: Option<TxnId>) {
        if let Some(txn) = txn
            && self.grant_refused.is_none_or(|(at, _)| at <= p)
        {
            self.grant_refused = Some((p, txn.client));
        }
    }

    /// `position_leader(p)`: the `next_leader` of the visible entry at `p - 1`; none at
    /// `p = 1`, after a no-op, or when `p - 1` is truncated away.
    fn is_position_leader(&self, me: ReplicaId, bugs: &ProtocolBugs, p: Position) -> bool {
        if p.0 <= 1 {
            return false;
        }
        self.slots
            .get(&p.prev())
            .filter(|s| s.visible || bugs.leader_from_unchosen_entry())
            .is_some_and(|s| s.entry.next_leader == Some(me))
    }

    /// A writer's grant request for `p` says it finished `p - 1` itself, chosen at
    /// `ballot` (its visible mark may still be on the way): if this replica holds
    /// `p - 1` at that ballot — the one value of that ballot there — it marks it
    /// visible now, as the mark would.
    pub fn mark_previous_visible(
        &mut self,
        kind: ReplicaKind,
        bugs: &ProtocolBugs,
        p: Position,
        ballot: Ballot,
        out: &mut Vec<Output>,
    ) {
        if p.0 <= 1 {
            return;
        }
        let Some(slot) = self
            .slots
            .get(&p.prev())
            .filter(|s| !s.visible && s.ballot == ballot)
        else {
            return;
        };
        let entry = slot.entry.clone();
        // Marking the value it holds cannot conflict with it.
        let _ = self.mark_visible(kind, bugs, p.prev(), ballot, entry, out);
    }

    /// Records `entry` as the visible value at `p`, advances the visible watermark,
    /// and applies what became applicable (not on witnesses).
    // `bugs` is read only by the out-of-order knob, which production builds lack.
    #[cfg_attr(not(feature = "sim-bugs"), expect(unused_variables))]
    pub fn mark_visible(
        &mut self,
        kind: ReplicaKind,
        bugs: &ProtocolBugs,
        p: Position,
        ballot: Ballot,
        entry: LogEntry,
        out: &mut Vec<Output>,
    ) -> Result<(), Position> {
        if p <= self.truncated {
            return Ok(());
        }
        if let Some(s) = self.slots.get(&p).filter(|s| s.visible) {
            return if s.entry == entry { Ok(()) } else { Err(p) };
        }
        // The slot is rewritten unless it holds this value at this ballot already and
        // the watermark moves over it: the watermark alone then says it is visible
        // (invariant visible-below-watermark, `SlotRecord::visible`).
        let watermark_covers = p == self.visible.next()
            && self
                .slots
                .get(&p)
                .is_some_and(|s| s.ballot == ballot && s.entry == entry);
        let slot = SlotRecord {
            ballot,
            entry,
            visible: true,
        };
        let mut write = if watermark_covers {
            self.write()
        } else {
            self.write().slot(p, &slot)
        };
        self.slots.insert(p, Box::new(slot));
        let before = self.visible;
        while self
            .slots
            .get(&self.visible.next())
            .is_some_and(|s| s.visible)
        {
            self.visible = self.visible.next();
        }
        debug_assert!(self.visible >= p || !watermark_covers);
        #[cfg(feature = "sim-bugs")]
        let out_of_order = bugs.apply_out_of_order();
        #[cfg(not(feature = "sim-bugs"))]
        let out_of_order = false;
        // A replica that applies moves `applied` to the new `visible` in this step: the
        // `applied` marker then records the watermark too (`cells::stored_visible`),
        // and a cell write a commit is spared. A witness writes `visible` itself.
        let applies_now = kind != ReplicaKind::Witness && !out_of_order;
        if self.visible != before && !applies_now {
            write = write.watermark(VISIBLE, self.visible);
        }
        if !write.0.mutations.is_empty() {
            out.push(Output::Persist { mutation: write.0 });
        }
        if kind != ReplicaKind::Witness {
            #[cfg(feature = "sim-bugs")]
            if out_of_order {
                self.apply_across_a_gap(p, out);
                return Ok(());
            }
            let positions = (self.applied.0 + 1..=self.visible.0)
                .map(Position)
                .collect();
            self.apply(positions, Durability::Synced, out);
        }
        Ok(())
    }

    /// Applies visible positions above `applied`, in log order, as one atomic batch
    /// with the new `applied` marker.
    pub fn apply_ready(&mut self, out: &mut Vec<Output>) {
        let positions: Vec<Position> = (self.applied.0 + 1..=self.visible.0)
            .map(Position)
            .collect();
        self.apply(positions, Durability::Buffered, out);
    }

    /// The out-of-order knob: applies the position a mark just made visible even
    /// across a gap below it.
    #[cfg(feature = "sim-bugs")]
    fn apply_across_a_gap(&mut self, just_marked: Position, out: &mut Vec<Output>) {
        let mut positions: Vec<Position> = (self.applied.0 + 1..=self.visible.0)
            .map(Position)
            .collect();
        if just_marked > self.applied && !positions.contains(&just_marked) {
            positions.push(just_marked);
        }
        self.apply(positions, Durability::Buffered, out);
    }

    /// Applies `positions` (ascending, each with a slot) and moves `applied` to the
    /// last of them. `durability` is `Synced` when the `applied` marker records a
    /// visible watermark no other cell holds (a mark's apply).
    fn apply(&mut self, positions: Vec<Position>, durability: Durability, out: &mut Vec<Output>) {
        let Some(&last) = positions.last() else {
            return;
        };
        let mut rows: Vec<RowMutation> = Vec::new();
        for p in &positions {
            let slot = self
                .slots
                .get(p)
                .expect("positions up to `visible` (or the one just marked) have slots");
            let at_p: Vec<RowMutation> = crate::queue::stamped_entry(&self.eg, &slot.entry, *p)
                .iter()
                .map(|w| w.at(p.0))
                .collect();
            self.prepared.note(&self.eg, *p, &at_p);
            rows.extend(at_p);
        }
        self.applied = last;
        let global = global_copies(&self.eg, &rows);
        rows.push(self.write().watermark(APPLIED, last).0);
        out.push(Output::Apply {
            eg: self.eg.clone(),
            global,
            rows,
            entries: positions.len() as u64,
            durability,
        });
    }

    /// Rewrites a root row loaded in an older layout, in one write: the remembered
    /// records of the layout before `chosen_last` (`chosen_cells`: a `chosen:<p>` cell
    /// each, as loaded) move into the `chosen_last` cell, and the `grant:<p>` cells of
    /// the layout before grants lived in memory (`grant_cells`) are deleted. Nothing
    /// to do, no write.
    pub fn rewrite_older_layout(
        &self,
        chosen_cells: bool,
        grant_cells: bool,
        out: &mut Vec<Output>,
    ) {
        let mut write = self.write();
        if chosen_cells {
            write = write.chosen_last(&self.chosen).forget_chosen_cells();
        }
        if grant_cells {
            write = write.forget_grant_cells();
        }
        if !write.0.mutations.is_empty() {
            out.push(Output::Persist { mutation: write.0 });
        }
    }

    /// Whether a read at `p` (at most the applied position) may find prepared records,
    /// whose locks it returns (*locks-known*).
    pub fn may_hold_locks_at(&self, p: Position) -> bool {
        self.prepared.may_hold_at(p)
    }

    /// Whose entry was chosen at truncated position `p`, if still remembered.
    pub fn chosen_at(&self, p: Position) -> Option<ChosenTxn> {
        self.chosen.get(&p).cloned()
    }

    /// Drops the log below and at `through` (already applied everywhere it needs to
    /// be); keeps the slot at `through` only as the truncation watermark.
    pub fn truncate(
        &mut self,
        kind: ReplicaKind,
        through: Position,
        history_kept: u64,
        bugs: &ProtocolBugs,
        out: &mut Vec<Output>,
    ) {
        let kept = if kind == ReplicaKind::Witness {
            self.visible
        } else {
            self.applied.min(self.visible)
        };
        let through = through.min(kept);
        if through <= self.truncated {
            return;
        }
        let mut write = self.write();
        let mut global_rows = BTreeSet::new();
        let mut slots_held = false;
        let mut chosen_changed = false;
        for p in (self.truncated.0 + 1..=through.0).map(Position) {
            // Below `installed` there is no slot (nor history) to remember; of a long
            // stretch only the last few are kept.
            let remembered = p.0 + CHOSEN_REMEMBERED as u64 > through.0;
            let slot = self.slots.remove(&p);
            slots_held |= slot.is_some();
            if kind != ReplicaKind::Witness
                && let Some(slot) = &slot
            {
                global_rows.extend(global_rows_of(&self.eg, &slot.entry));
            }
            if let Some(slot) = &slot
                && remembered
            {
                self.chosen.insert(p, ChosenTxn::of_entry(&slot.entry));
                chosen_changed = true;
            }
            // Only the promises held are deleted: memory mirrors the root row's
            // promises (every one written is held, every held one loaded back), and a
            // deletion of a cell never written costs a write like any other. Most
            // positions have no promise (ballot 0). Grants live in memory only.
            if self.promises.remove(&p).is_some() {
                write = write.forget_promise(p);
            }
            self.grants.remove(&p);
        }
        // Every position's slot goes in one range deletion, and the remembered records
        // in one cell: a cell per position and family made truncation, which must keep
        // pace with the writes, a third of a commit's store writes.
        if slots_held {
            write = write.forget_slots(Position(self.truncated.0 + 1), through);
        }
        while self.chosen.len() > CHOSEN_REMEMBERED {
            self.chosen.pop_first();
        }
        if chosen_changed {
            write = write.chosen_last(&self.chosen);
        }
        self.truncated = through;
        write = write.watermark(TRUNCATED, through);
        let below = Position(through.0.saturating_sub(history_kept));
        let step = (history_kept / 4).max(1);
        let collect = kind != ReplicaKind::Witness && below.0 >= self.collected.0 + step;
        if collect {
            self.collected = below;
            write = write.watermark(COLLECTED, below);
        }
        if bugs.collect_without_floor() {
            self.collected = Position::NONE;
        }
        out.push(Output::Persist { mutation: write.0 });
        if collect {
            out.push(Output::CollectGarbage {
                eg: self.eg.clone(),
                below,
            });
        }
        if !global_rows.is_empty() {
            // Global index rows are read only at their newest version, never at a
            // position: what the entries being truncated wrote there is collectible
            // up to `through` at once (no history floor), and only this group writes
            // those rows, always above `through` from now on.
            out.push(Output::CollectGlobalGarbage {
                rows: global_rows.into_iter().collect(),
                below: through,
            });
        }
    }

    /// Checks the group's own invariants (panics on a broken one).
    pub fn check_invariants(&self, kind: ReplicaKind, bugs: &ProtocolBugs) {
        assert!(
            self.truncated <= self.visible,
            "{}: truncated above visible",
            self.eg
        );
        assert!(
            self.installed <= self.visible,
            "{}: installed above visible",
            self.eg
        );

        for p in (self.truncated.0 + 1..=self.visible.0).map(Position) {
            assert!(
                self.slots.get(&p).is_some_and(|s| s.visible),
                "{}: {p} below the visible mark is not visible",
                self.eg
            );
        }
        if kind != ReplicaKind::Witness && !bugs.apply_out_of_order() {
            assert!(
                self.applied <= self.visible,
                "{}: applied {} above visible {} (applied-below-visible)",
                self.eg,
                self.applied,
                self.visible
            );
        }
        for (p, slot) in &self.slots {
            if let Some(promise) = self.promises.get(p) {
                assert!(
                    slot.visible || slot.ballot <= *promise,
                    "{}: accepted above the promise at {p}",
                    self.eg
                );
            }
        }
    }
}
