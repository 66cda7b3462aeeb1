//! Invariant 1, **single-value**: at most one value is chosen at each (group, position).
//! Paper §4.6 (one Paxos instance per log position) and §4.4.2 (proposal 0 is safe only
//! because the leader admits one value to it).
//!
//! A value is chosen when a majority of voters accepted it at the same ballot — a
//! majority of some voter set a range holding the group's key has had (the
//! topology's, and each one the operator's removals left), since a proposer may count
//! any set a placement it read gave the group's range; a visible mark anywhere also
//! claims the value is chosen. (A set another range had, never the group's, counts
//! for nothing: no proposer of the group ever counted it.) The first value seen chosen
//! at a position is the ground truth every other checker uses.

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::LogEntry;
use megastore_types::{Ballot, EgId, Position, ReplicaId, TxnId};

use crate::observation::{Observation, RangeVoters};
use crate::workload::COLUMN;

/// Who accepted each (ballot, value) at one position.
type Votes = BTreeMap<(Ballot, Vec<u8>), (LogEntry, BTreeSet<ReplicaId>)>;

/// The chosen value of every position seen so far.
#[derive(Debug, Default)]
pub struct ChosenLog {
    chosen: BTreeMap<(EgId, Position), LogEntry>,
    /// The ballot each position was first seen chosen at.
    ballots: BTreeMap<(EgId, Position), Ballot>,
    /// When (real time, ns) each position was first seen chosen.
    chosen_at: BTreeMap<(EgId, Position), u64>,
    max_visible: BTreeMap<EgId, Position>,
    /// Every (ballot, value) each voter ever durably accepted (replied or not: a learner
    /// reading the slots counts it either way). "Chosen" is about
    /// this history, not the current slots: a voter may have moved on to a higher
    /// ballot since.
    accepts: BTreeMap<(EgId, Position), Votes>,
    /// Every voter set a range of the stored placement has had, with the range's
    /// bounds at the time, seen so far.
    voter_sets: BTreeSet<RangeVoters>,
    /// The placement version whose voter sets were last added.
    sets_of: Option<megastore_placement::Version>,
}

impl ChosenLog {
    /// Adds the stored placement's voter sets, once per version (after every event):
    /// a proposer may count a set that no accept was observed under — the sets before
    /// a voter change made before the first accept — so the sets are recorded as the
    /// placement changes, not only when accepts are seen.
    pub fn observe_placement(&mut self, obs: &Observation<'_>) {
        let version = obs.placement_version();
        if self.sets_of != Some(version) {
            self.sets_of = Some(version);
            self.voter_sets.extend(obs.voter_sets());
        }
    }

    /// The chosen value at `p`, if seen.
    pub fn get(&self, eg: &EgId, p: Position) -> Option<&LogEntry> {
        self.chosen.get(&(eg.clone(), p))
    }

    /// When (real time, ns) `p` was first seen chosen, if it was.
    pub fn chosen_at(&self, eg: &EgId, p: Position) -> Option<u64> {
        self.chosen_at.get(&(eg.clone(), p)).copied()
    }

    /// Every position of `eg` seen chosen with `txn`.
    pub fn positions_of(&self, eg: &EgId, txn: TxnId) -> Vec<Position> {
        self.chosen
            .range((eg.clone(), Position::NONE)..)
            .take_while(|((g, _), _)| g == eg)
            .filter(|(_, e)| e.holds(txn))
            .map(|((_, p), _)| *p)
            .collect()
    }

    /// Chosen positions whose entry combines two or more transactions.
    pub fn combined_count(&self) -> usize {
        self.chosen
            .values()
            .filter(|e| !e.joined.is_empty())
            .count()
    }

    /// Chosen positions holding a transaction, and how many were chosen at ballot 0
    /// (the fast path).
    pub fn fast_path_counts(&self) -> (usize, usize) {
        let writes: Vec<_> = self
            .chosen
            .iter()
            .filter(|(_, e)| !e.is_noop())
            .map(|(k, _)| k)
            .collect();
        let fast = writes
            .iter()
            .filter(|k| self.ballots.get(**k).is_some_and(|b| b.is_zero()))
            .count();
        (writes.len(), fast)
    }

    /// The highest position marked visible anywhere.
    pub fn max_visible(&self, eg: &EgId) -> Position {
        self.max_visible.get(eg).copied().unwrap_or(Position::NONE)
    }

    /// Groups with a visible position.
    pub fn groups(&self) -> impl Iterator<Item = (&EgId, Position)> + '_ {
        self.max_visible.iter().map(|(eg, p)| (eg, *p))
    }

    /// Every chosen position of a group, in order.
    pub fn entries<'a>(
        &'a self,
        eg: &'a EgId,
    ) -> impl Iterator<Item = (Position, &'a LogEntry)> + 'a {
        self.chosen
            .range((eg.clone(), Position::NONE)..)
            .take_while(move |((g, _), _)| g == eg)
            .map(|((_, p), e)| (*p, e))
    }

    /// The group's data rows after applying positions `1..=p` (key → value), or
    /// `None` if some position up to `p` was never seen chosen. Not its global index
    /// mirror, which the workload's reads do not cover (see [`ChosenLog::mirror_at`]).
    pub fn state_at(&self, eg: &EgId, p: Position) -> Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.rows_at(eg, p, false)
    }

    /// The group's global index mirror after applying positions `1..=p` (mirror row →
    /// value), or `None` if some position up to `p` was never seen chosen.
    pub fn mirror_at(&self, eg: &EgId, p: Position) -> Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.rows_at(eg, p, true)
    }

    /// The data rows, or (`mirror`) the mirror rows, after positions `1..=p`.
    fn rows_at(
        &self,
        eg: &EgId,
        p: Position,
        mirror: bool,
    ) -> Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        let mut state = BTreeMap::new();
        let range = megastore_paxos::global_mirror_range(eg);
        let writes = self.writes_through(eg, p, |row| range.contains(row) == mirror)?;
        for (_, write) in writes {
            for cell in &write.cells {
                match cell {
                    megastore_paxos::CellWrite::Set { column, value } if column == COLUMN => {
                        state.insert(write.row.clone(), Some(value.clone()));
                    }
                    megastore_paxos::CellWrite::Delete { column } if column == COLUMN => {
                        state.insert(write.row.clone(), None);
                    }
                    _ => {}
                }
            }
        }
        Some(state)
    }

    /// The row writes of `eg`'s positions `1..=p` to rows `of` takes, in log order with
    /// their positions, or `None` if some position up to `p` was never seen chosen.
    pub fn writes_through(
        &self,
        eg: &EgId,
        p: Position,
        of: impl Fn(&[u8]) -> bool,
    ) -> Option<Vec<(Position, &megastore_paxos::RowWrite)>> {
        let mut writes = Vec::new();
        for q in 1..=p.0 {
            let entry = self.get(eg, Position(q))?;
            let these = entry.writes.iter().filter(|w| of(&w.row));
            writes.extend(these.map(|w| (Position(q), w)));
        }
        Some(writes)
    }

    /// Voter `r` durably accepted `entry` at `ballot`: it replied so (replies leave only
    /// after the state they depend on is durable), or its store holds it (a crash right
    /// after the write lost the reply).
    pub fn accepted(
        &mut self,
        obs: &Observation<'_>,
        r: ReplicaId,
        (eg, p): (&EgId, Position),
        (ballot, entry): (Ballot, &LogEntry),
        found: &mut Vec<(&'static str, String)>,
    ) {
        let key = (ballot, megastore_paxos::cells::encode(entry));
        self.voter_sets.extend(obs.voter_sets());
        let voters = self.accepts.entry((eg.clone(), p)).or_default();
        let (value, who) = voters
            .entry(key)
            .or_insert_with(|| (entry.clone(), BTreeSet::new()));
        who.insert(r);
        let a_majority = |set: &&RangeVoters| {
            let voters = &set.voters;
            who.iter().filter(|r| voters.contains(r)).count() > voters.len() / 2
        };
        if self
            .voter_sets
            .iter()
            .filter(|set| set.holds(eg))
            .any(|set| a_majority(&set))
        {
            let (value, count) = (value.clone(), who.len());
            let how = format!("accepted by {count} voters at {ballot}");
            self.claim(obs.now, (eg, p), (value, ballot), &how, found);
        }
    }

    /// Looks at every replica's slot at `p`: a visible mark claims its value is chosen.
    pub fn observe(
        &mut self,
        obs: &Observation<'_>,
        eg: &EgId,
        p: Position,
        found: &mut Vec<(&'static str, String)>,
    ) {
        // Every server's store: a visible mark is a claim wherever it was made.
        for r in obs.servers() {
            let Some(slot) = obs.stored_slot(r, eg, p) else {
                continue;
            };
            if slot.visible {
                let max = self.max_visible.entry(eg.clone()).or_default();
                *max = (*max).max(p);
                let how = format!("visible at replica {}", r.0);
                self.claim(obs.now, (eg, p), (slot.entry, slot.ballot), &how, found);
            }
        }
    }

    fn claim(
        &mut self,
        now: u64,
        (eg, p): (&EgId, Position),
        (entry, ballot): (LogEntry, Ballot),
        how: &str,
        found: &mut Vec<(&'static str, String)>,
    ) {
        match self.chosen.get(&(eg.clone(), p)) {
            None => {
                self.chosen.insert((eg.clone(), p), entry);
                self.ballots.insert((eg.clone(), p), ballot);
                self.chosen_at.insert((eg.clone(), p), now);
            }
            Some(existing) if *existing != entry => found.push((
                "single-value",
                format!(
                    "{eg} {p}: {:?} is chosen, but {:?} is {how}",
                    existing.txn, entry.txn
                ),
            )),
            Some(_) => {}
        }
    }
}
