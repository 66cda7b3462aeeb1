//! A voter catch-up pass (docs/protocol.md, "Voter changes"): after a range's voter
//! set changed, this replica — a voter of the new set — goes over every group of the
//! range it has registered and makes sure a majority of the new set hold the group's
//! log up to the highest position any of them knew of: the condition for the range's
//! next voter change (`megastore_placement::Placement::record_caught_up`).
//!
//! Per group, the sweep probes the set ([`super::sweep::Sweeper::hold`]); when fewer
//! than a majority hold the log, this replica settles what they lack — each settle
//! marks the position visible at every member — and probes again, a bounded number of
//! times. The pass ends with a [`VoterPassReport`]: every group held, or which were
//! not (the operator runs it again), or why it could not run.
//!
//! Why every voter runs it: a group may be registered at only some voters (those that
//! took part in its positions), but every position chosen has a holder among the
//! voters of the new set, so the union of their registries covers every group; and a
//! pass that started proves its voter read the change (it checks its own placement),
//! so together the passes also show that every voter refuses proposers still counting
//! the set before (*votes-by-the-current-voters*).
//!
//! Invariant *pass-over-one-change*: a pass reports groups held only for the change
//! it was started for — if its replica's placement shows the range's voters changed
//! again (or the range split, moved away or froze) before it ends, it ends refused.

use std::collections::{BTreeMap, VecDeque};

use megastore_placement::{RangeId, Version};
use megastore_rowstore::KeyRange;
use megastore_types::{EgId, NodeId, Position, ReplicaId, ReplicaKind};

use super::sweep::SweepAction;
use super::{DRIVER_CLIENT, GroupSlot, Output, Replica};
use crate::messages::{LogState, ReplicaRequest};
use crate::replica_set::ReplicaSet;

/// Groups a pass probes at once.
const IN_FLIGHT_MAX: usize = 16;

/// Groups listed at a time.
const LIST_PAGE: usize = 256;

/// Probes of one group before the pass counts it as not held.
const ATTEMPTS_MAX: u32 = 8;

/// How many groups not held a report names.
const NAMED_MAX: usize = 8;

/// Whether a group's log is held by a majority of its voters, as one probe found it
/// (a voter catch-up pass's question, `voter_pass.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A majority of the voters have every position visible up to the highest
    /// position any voter that answered knew of.
    Held,
    /// Fewer do: this replica settles the positions they lack (its settles mark each
    /// visible at every member of the set), or asks for a snapshot, and the pass probes
    /// again.
    Lacking,
    /// Fewer than a majority of the voters answered: the highest position they knew
    /// of may not be the group's.
    Unanswered,
}

/// [`Hold`] from the log states of the voters that answered (this replica's among
/// them, if it votes), over the group's replica set; with what to settle when lacking.
///
/// Why the highest position *any* answering voter knew of is far enough: a position
/// chosen before the voter change was accepted by a majority of the set before, of
/// which at least `⌊n/2⌋` are voters of the set after it — enough to meet every
/// majority of them, so some voter that answered knows of it.
pub(crate) fn hold_of(
    set: &ReplicaSet<'_>,
    states: &BTreeMap<ReplicaId, LogState>,
) -> (Hold, Position, Position) {
    let voters: Vec<&LogState> = states
        .iter()
        .filter(|(r, _)| set.is_voter(**r))
        .map(|(_, s)| s)
        .collect();
    let highest = voters
        .iter()
        .map(|s| s.highest)
        .max()
        .unwrap_or(Position::NONE);
    let lowest_visible = voters
        .iter()
        .map(|s| s.visible)
        .min()
        .unwrap_or(Position::NONE);
    if voters.len() < set.majority() {
        return (Hold::Unanswered, lowest_visible, highest);
    }
    let holding = voters.iter().filter(|s| s.visible >= highest).count();
    let hold = if holding >= set.majority() {
        Hold::Held
    } else {
        Hold::Lacking
    };
    (hold, lowest_visible, highest)
}

/// How a voter catch-up pass ended at one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterPassReport {
    /// The range.
    pub range: RangeId,
    /// The voter change it was for (the range's `voters_changed`).
    pub changed_at: Version,
    /// What it found.
    pub outcome: Result<VoterPassHeld, VoterPassRefused>,
}

/// What a pass that ran found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VoterPassHeld {
    /// Groups held by a majority of the voters.
    pub held: u64,
    /// Groups that were not, after every attempt.
    pub not_held: u64,
    /// The first few of those.
    pub named: Vec<EgId>,
}

impl VoterPassHeld {
    /// Whether every group is held.
    pub fn complete(&self) -> bool {
        self.not_held == 0
    }
}

/// Why a pass did not run, or stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterPassRefused {
    /// The replica is not placed over servers (every replica holds every group, and
    /// voters never change).
    #[error("this replica is not placed over servers")]
    NotPlaced,
    /// It runs no sweep, which the pass works through.
    #[error("this replica runs no sweep")]
    NoSweep,
    /// Its placement has no such range (split since, or never).
    #[error("{0} is not in this server's placement")]
    UnknownRange(RangeId),
    /// It holds no voter slot of the range.
    #[error("this server holds no voter slot of {0}")]
    NotAVoter(RangeId),
    /// Its placement does not show the range's voters changing at that version (it is
    /// caught up already, changed again, or the server's placement is older).
    #[error(
        "{range}'s voters did not change at {changed_at} in this server's placement (it shows {shows:?})"
    )]
    NotThatChange {
        /// The range.
        range: RangeId,
        /// The change asked about.
        changed_at: Version,
        /// What the placement shows.
        shows: Option<Version>,
    },
    /// The range is frozen here for a move.
    #[error("{0} is frozen here for a move")]
    Frozen(RangeId),
    /// Another pass runs.
    #[error("a catch-up pass over {0} runs already")]
    Busy(RangeId),
}

/// A pass under way.
#[derive(Debug)]
pub(crate) struct VoterPass {
    range: RangeId,
    changed_at: Version,
    /// The range's groups.
    span: KeyRange,
    listing: Listing,
    /// Listed, not yet started.
    waiting: VecDeque<EgId>,
    /// Started: the probes made of each.
    running: BTreeMap<EgId, u32>,
    found: VoterPassHeld,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Listing {
    /// The next page starts at this key.
    From(Vec<u8>),
    /// A page was asked for.
    Asked,
    /// Every group is listed.
    Done,
}

impl Replica {
    /// [`super::Input::CatchUpVoters`]: starts a pass over `range` for its voter change
    /// at `changed_at`, or reports at once why not.
    pub(super) fn start_voter_pass(
        &mut self,
        range: RangeId,
        changed_at: Version,
        out: &mut Vec<Output>,
    ) {
        let span = match (&self.voter_pass, &self.sweeper) {
            (Some(_), _) => Err(VoterPassRefused::Busy(range)),
            (None, None) => Err(VoterPassRefused::NoSweep),
            (None, Some(_)) => self.voter_pass_refusal(range, changed_at),
        };
        let span = match span {
            Ok(span) => span,
            Err(why) => {
                out.push(Output::VoterPassEnded(VoterPassReport {
                    range,
                    changed_at,
                    outcome: Err(why),
                }));
                return;
            }
        };
        let start = span.start.clone();
        self.voter_pass = Some(VoterPass {
            range,
            changed_at,
            span,
            listing: Listing::From(start),
            waiting: VecDeque::new(),
            running: BTreeMap::new(),
            found: VoterPassHeld::default(),
        });
    }

    /// The range's groups if this replica may run (or go on with) a pass over it for
    /// the change at `changed_at`; else why not.
    fn voter_pass_refusal(
        &self,
        range: RangeId,
        changed_at: Version,
    ) -> Result<KeyRange, VoterPassRefused> {
        let server = self.placement.as_ref().ok_or(VoterPassRefused::NotPlaced)?;
        let current = server
            .view()
            .range(range)
            .ok_or(VoterPassRefused::UnknownRange(range))?;
        let mine = current
            .slot(self.me.id)
            .is_some_and(|slot| slot.server == server.server());
        if !mine || self.me.kind == ReplicaKind::ReadOnly {
            return Err(VoterPassRefused::NotAVoter(range));
        }
        if current.voters_changed != Some(changed_at) {
            return Err(VoterPassRefused::NotThatChange {
                range,
                changed_at,
                shows: current.voters_changed,
            });
        }
        if server.frozen().contains_key(&range) {
            return Err(VoterPassRefused::Frozen(range));
        }
        Ok(KeyRange {
            start: current.start.clone(),
            end: current.end.clone(),
        })
    }

    /// [`super::Input::VoterPassListed`]: the next page of the range's registered
    /// groups.
    pub(super) fn voter_pass_listed(&mut self, groups: Vec<EgId>) {
        let Some(pass) = &mut self.voter_pass else {
            return;
        };
        pass.listing = match groups.last() {
            Some(last) if groups.len() == LIST_PAGE => {
                let mut next = last.0.clone();
                next.push(0);
                Listing::From(next)
            }
            _ => Listing::Done,
        };
        if self.config.bugs.skip_voter_catch_up() {
            pass.found.held += groups.len() as u64;
            return;
        }
        pass.waiting.extend(groups);
    }

    /// The sweep's answer about one group of the pass.
    pub(super) fn voter_pass_hold(&mut self, eg: &EgId, hold: Hold) {
        let Some(pass) = &mut self.voter_pass else {
            return;
        };
        if hold == Hold::Held && pass.running.remove(eg).is_some() {
            pass.found.held += 1;
        }
    }

    /// Moves the pass along after a step: ends it if the placement no longer allows
    /// it, lists the next groups, probes the groups whose sweep is free (loading them
    /// first), gives up on groups probed too often, and reports once nothing is left.
    pub(super) fn drive_voter_pass(&mut self, out: &mut Vec<Output>) {
        let Some(pass) = &self.voter_pass else {
            return;
        };
        if let Err(why) = self.voter_pass_refusal(pass.range, pass.changed_at) {
            self.end_voter_pass(Err(why), out);
            return;
        }
        let Some(pass) = &mut self.voter_pass else {
            return;
        };
        if let Listing::From(start) = &pass.listing
            && pass.waiting.is_empty()
        {
            out.push(Output::ListForPass {
                groups: KeyRange {
                    start: start.clone(),
                    end: pass.span.end.clone(),
                },
                limit: LIST_PAGE,
            });
            pass.listing = Listing::Asked;
        }
        while pass.running.len() < IN_FLIGHT_MAX
            && let Some(eg) = pass.waiting.pop_front()
        {
            pass.running.insert(eg, 0);
        }
        let running: Vec<(EgId, u32)> = pass.running.iter().map(|(e, n)| (e.clone(), *n)).collect();
        for (eg, probes) in running {
            self.probe_for_pass(eg, probes, out);
        }
        let Some(pass) = &self.voter_pass else {
            return;
        };
        if pass.listing == Listing::Done && pass.waiting.is_empty() && pass.running.is_empty() {
            let found = pass.found.clone();
            self.end_voter_pass(Ok(found), out);
        }
    }

    /// Probes `eg` (probed `probes` times so far) for the pass, if its sweep is free.
    fn probe_for_pass(&mut self, eg: EgId, probes: u32, out: &mut Vec<Output>) {
        let here = match self.groups.get(&eg) {
            Some(GroupSlot::Ready(group)) => group.log_state(),
            Some(GroupSlot::Loading(_)) => return,
            Some(GroupSlot::Failed(_)) => {
                self.give_up_in_pass(&eg);
                return;
            }
            None => {
                let from = NodeId::Client(DRIVER_CLIENT);
                self.handle(from, ReplicaRequest::LogState { id: 0, eg }, out);
                return;
            }
        };
        let Some(sweeper) = &mut self.sweeper else {
            return;
        };
        if sweeper.busy(&eg) {
            return;
        }
        if probes >= ATTEMPTS_MAX {
            self.give_up_in_pass(&eg);
            return;
        }
        let mut sends = Vec::new();
        let Some(actions) = sweeper.hold(self.now, &eg, here, &mut sends) else {
            return;
        };
        out.extend(
            sends
                .into_iter()
                .map(|(to, message)| Output::Send { to, message }),
        );
        if let Some(pass) = &mut self.voter_pass
            && let Some(n) = pass.running.get_mut(&eg)
        {
            *n += 1;
        }
        for action in actions {
            if let SweepAction::Hold(eg, hold) = action {
                self.voter_pass_hold(&eg, hold);
            }
        }
    }

    fn give_up_in_pass(&mut self, eg: &EgId) {
        let Some(pass) = &mut self.voter_pass else {
            return;
        };
        if pass.running.remove(eg).is_some() {
            pass.found.not_held += 1;
            if pass.found.named.len() < NAMED_MAX {
                pass.found.named.push(eg.clone());
            }
        }
    }

    fn end_voter_pass(
        &mut self,
        outcome: Result<VoterPassHeld, VoterPassRefused>,
        out: &mut Vec<Output>,
    ) {
        if let Some(pass) = self.voter_pass.take() {
            out.push(Output::VoterPassEnded(VoterPassReport {
                range: pass.range,
                changed_at: pass.changed_at,
                outcome,
            }));
        }
    }
}
