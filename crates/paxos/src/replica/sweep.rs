//! The replica's sweep: finishing abandoned positions, catching up from peers, and
//! truncating the log.
//!
//! A writer that crashes (or loses contact) after its value was accepted leaves a
//! position accepted but not visible; readers would settle it when they need it, but
//! the sweep settles it anyway, so logs do not keep holes (paper §4.6.3: "replication
//! servers periodically scan for incomplete writes and propose no-op values"). Each
//! sweep also probes one group at every other replica, in turn (with a bounded cache,
//! the registry walk's; after a start, every registered group within the first sweeps:
//! [`Sweeper::take_walk_due`], and every group the other replicas' registries list that
//! this one never persisted: `peer_listing`), and every group whose
//! log outgrew [`SweepConfig::probe_above`] or which lacks chosen positions
//! ([`Sweeper::probe_due`]): it settles what this replica lacks up to the furthest
//! visible position seen (how a read-only replica, which no writer waits for, catches
//! up), and, when every replica answered, truncates the log below what every full and
//! read-only replica applied and every witness holds. A replica that does not answer
//! (down, or cut off) holds truncation back only until the log outgrew
//! [`SweepConfig::outage_log_max`]; past it the log is truncated below what those that
//! answered hold, and the one away installs a snapshot when it is back.
//!
//! It also brings a replica that lost its store back: it *clears* each group (asks
//! every other replica for its log state and, once a majority of the other voters
//! answered, records the highest position they held as the group's rejoin floor —
//! see [`super::Rejoin`]), and installs a snapshot from a replica that applied more
//! when the positions it lacks are truncated everywhere it asked.
//!
//! Catching up is the proposer's catch-up (`proposer/catch_up.rs`, the same loop a
//! current read runs, here many positions at once), with this replica as the
//! proposer: the invalidation step is done for anything it exposes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::LockOutcome;
use megastore_types::{EgId, NodeId, Position, ReplicaId, ReplicaKind, Time};

use super::peer_listing::{self, PeerListing};
use super::voter_pass::{Hold, hold_of};
use super::{GroupLog, Rejoin};
use crate::cells::SlotRecord;
use crate::messages::{LogState, Message, ReplicaReply, ReplicaRequest};
use crate::proposer::catch_up::{CatchUp, CatchUpProgress};
use crate::proposer::{Ctx, ProposerConfig, Wiring};
use crate::replica_set::ReplicaSet;

/// How the sweep runs.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Time between sweeps. A position accepted but not visible at two sweeps in a row
    /// is finished.
    pub interval: Duration,
    /// The replica as a proposer (its id must be `ProposerId::replica(id)`).
    pub proposer: ProposerConfig,
    /// Seeds its random numbers (backoff, and where request ids start): a fresh random
    /// value on every process start, or a reply to the previous process could be taken
    /// for the answer to a new request.
    pub seed: u64,
    /// Positions of data history kept below the truncation point (reads at older
    /// positions are refused, and the versions only they could see collected):
    /// [`crate::HISTORY_KEPT`] in a deployment, a few in the simulator so that
    /// collection happens within a run.
    pub history_kept: u64,
    /// Visible log positions kept below the truncation floor, so that a watcher
    /// ([`crate::watch`]) a little behind can still read each entry: a deployment's
    /// `[history] log_positions`. 0 truncates as far as every replica allows (the
    /// simulator does: keeping more only delays truncation, which its runs cover).
    pub log_kept: u64,
    /// A loaded group holding more than this many visible positions above its
    /// truncation point is probed at every sweep (up to [`DUE_PROBES_MAX`] groups a
    /// sweep), not only in its round-robin turn — which, with many busy groups, came
    /// too seldom: the logs, in memory and in the root rows, grew for as long as the
    /// writes went on. A deployment's `log_kept` + [`TRUNCATE_EVERY`]; a few in the
    /// simulator, so that its runs take this way too.
    pub probe_above: u64,
    /// Visible positions a group's log may hold above its truncation point while some
    /// other replica does not answer the sweep's probes (down, or cut off). Past it,
    /// the log is truncated to half of it, below what the replicas that answered
    /// hold; the one that did not lacks positions nobody keeps when it is back, and
    /// installs a snapshot. Without this bound one replica down under load held every
    /// other replica's logs back for the whole outage, their memory and disk growing
    /// with the writes. A deployment's `[history] outage_log_positions`; 16 in the
    /// simulator, so that its crashes and partitions pass it.
    pub outage_log_max: u64,
}

/// Positions a busy group's log grows past what it keeps before the sweep probes it
/// to truncate (a deployment's [`SweepConfig::probe_above`] is `log_kept` + this).
/// Defined beside the size limits, because the config's validation of `[history]
/// outage_log_positions` depends on it too.
pub use megastore_types::limits::TRUNCATE_EVERY;

/// Groups probed at one sweep out of their round-robin turn (logs outgrown, or chosen
/// positions lacking): bounds the requests a sweep sends while some replica is down
/// (the probes then cannot truncate, and the same groups are due again at the next
/// sweep).
pub const DUE_PROBES_MAX: usize = 256;

/// How many registered groups the walk takes at each sweep once its start pass is over
/// (each gets probed): idle groups need nothing more — a write marks what a replica
/// lacks ([`GroupLog::lacks_chosen_positions`]), and a log that outgrows
/// [`SweepConfig::probe_above`] is probed anyway.
pub(crate) const WALK_GROUPS: usize = 1;

/// Something the sweep decided that changes this replica's own state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SweepAction {
    /// Drop the group's log up to and including this position.
    Truncate(EgId, Position),
    /// A majority of the other voters held nothing above this position: the group's
    /// rejoin floor.
    Clear(EgId, Position),
    /// Install this snapshot.
    Install {
        eg: EgId,
        at: Position,
        slot: SlotRecord,
        rows: Vec<megastore_rowstore::Row>,
    },
    /// What a voter catch-up pass's probe found of the group ([`Sweeper::hold`]).
    Hold(EgId, Hold),
    /// Groups another replica holds (a page of the start pass's listing of its
    /// registry, `peer_listing`): load each this replica does not hold, and probe it.
    PeersHold(Vec<EgId>),
    /// A snapshot asked of `source` did not come: the group stays behind until a later
    /// probe's install does (reported to the host, [`super::Output::InstallFailed`]).
    InstallFailed {
        eg: EgId,
        source: ReplicaId,
        why: InstallFailure,
    },
}

/// Why a snapshot install did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallFailure {
    /// No answer within the RPC timeout: the source down or cut off, or its snapshot
    /// too large for the transport to carry (`limits::REPLICATION_REPLY_BYTES_MAX`).
    #[error(
        "no answer within the RPC timeout (the source down or cut off, or the snapshot \
         too large to carry)"
    )]
    NoAnswer,
    /// The source refused.
    #[error("the source refused: {0:?}")]
    Refused(crate::messages::ReplicaError),
}

/// Why the sweep probes a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeFor {
    /// Its rounds: catch up, install a snapshot, truncate.
    Sweep,
    /// Clearing a rejoining replica's group (and then as `Sweep`).
    Clear,
    /// A voter catch-up pass ([`Sweeper::hold`]).
    Hold,
}

#[derive(Debug)]
enum Task {
    /// Asked every other replica for its log state (`clearing`: to clear the group).
    Probe {
        asked: BTreeMap<u64, ReplicaId>,
        states: BTreeMap<ReplicaId, LogState>,
        deadline: Time,
        /// What the probe is for.
        purpose: ProbeFor,
    },
    /// Asked `source` for a snapshot of what it applied, through `target`.
    Install {
        deadline: Time,
        source: ReplicaId,
        target: Position,
    },
    /// Settling the positions up to the furthest visible one seen, up to
    /// [`CATCH_UP_IN_FLIGHT_MAX`] at once.
    CatchUp(CatchUp),
}

/// Positions a catch-up settles at once (each is its own Paxos instance).
const CATCH_UP_IN_FLIGHT_MAX: usize = 32;

/// The sweep's state.
pub(crate) struct Sweeper {
    config: SweepConfig,
    me: ReplicaId,
    wiring: Wiring<EgId>,
    tasks: BTreeMap<EgId, Task>,
    next_sweep: Time,
    /// Positions accepted but not visible at the last sweep.
    pending_last: BTreeSet<(EgId, Position)>,
    /// Rotates which group is probed.
    cursor: usize,
    /// Rotates which due groups are probed when more are due than a sweep probes.
    due_cursor: usize,
    /// Groups whose last catch-up failed: probed before any new catch-up. A position a
    /// catch-up cannot settle is usually truncated everywhere else — only a snapshot
    /// helps, and only a probe asks for one; a catch-up started again at every sweep
    /// would keep the group from ever being probed.
    failed: BTreeSet<EgId>,
    /// The idle group probed at each sweep comes from the registry walk (a replica
    /// with a bounded cache, which does not hold every group) rather than from the
    /// loaded groups.
    walk: bool,
    /// A sweep ran and the walk should take its next groups.
    walk_due: bool,
    /// The walk has not yet gone once round the registry since this replica started:
    /// it takes [`DUE_PROBES_MAX`] groups a sweep, not [`WALK_GROUPS`].
    walk_start_pass: bool,
    /// How many groups the walk's last listing asked for.
    walk_asked: usize,
    /// The start pass's listing of the other replicas' registries.
    peers: PeerListing,
    /// Groups whose last snapshot install did not happen, and the position its source
    /// had applied: still what the group is behind by (the replica's lag shows it)
    /// until it applies that far. A hint for the operator, never a protocol input: at
    /// most [`UNREACHED_MAX`] groups, forgotten all at once when full.
    unreached: BTreeMap<EgId, Position>,
}

/// The most groups [`Sweeper`] remembers an install that did not happen of.
const UNREACHED_MAX: usize = 4096;

impl Sweeper {
    /// The server's newer placement: the sweep's invalidations route by it.
    pub(crate) fn observe_placement(&mut self, placement: megastore_placement::Placement) {
        self.wiring.observe_placement(placement);
    }

    /// The placement the sweep's invalidations route by, if placed.
    pub(crate) fn placement(&self) -> Option<&megastore_placement::Placement> {
        self.wiring.placement()
    }

    pub(crate) fn new(config: SweepConfig, me: ReplicaId, walk: bool) -> Self {
        let wiring = Wiring::new(&config.proposer, config.seed);
        Self {
            config,
            me,
            wiring,
            tasks: BTreeMap::new(),
            next_sweep: Time::ZERO,
            pending_last: BTreeSet::new(),
            cursor: 0,
            due_cursor: 0,
            failed: BTreeSet::new(),
            walk,
            walk_due: false,
            walk_start_pass: true,
            walk_asked: 0,
            peers: PeerListing::default(),
            unreached: BTreeMap::new(),
        }
    }

    /// Drops everything kept about `eg` (it left this replica's memory, no longer
    /// served here): its task, its failure, the positions seen pending. Late answers
    /// to its task find none and are ignored.
    pub(crate) fn forget(&mut self, eg: &EgId) {
        self.tasks.remove(eg);
        self.failed.remove(eg);
        self.pending_last.retain(|(g, _)| g != eg);
    }

    /// Whether a task runs for `eg`, or one failed and waits for the next sweep.
    pub(crate) fn busy(&self, eg: &EgId) -> bool {
        self.tasks.contains_key(eg) || self.failed.contains(eg)
    }

    /// How many of the walk's next groups to list and probe, if a sweep ran since the
    /// last call: [`WALK_GROUPS`], or [`DUE_PROBES_MAX`] during the start pass. A
    /// replica back from a restart does not know which groups it missed writes to
    /// while it was down — nothing marks a lacking position until a later write does —
    /// so at one group a sweep its idle groups stayed behind (snapshot and
    /// inconsistent reads there serving old state) for as many sweeps as it has
    /// groups. The start pass probes every group once within a few sweeps.
    pub(crate) fn take_walk_due(&mut self) -> Option<usize> {
        if !std::mem::take(&mut self.walk_due) {
            return None;
        }
        self.walk_asked = if self.walk_start_pass {
            DUE_PROBES_MAX
        } else {
            WALK_GROUPS
        };
        Some(self.walk_asked)
    }

    /// The walk's listing returned `listed` groups: fewer than it asked for, it reached
    /// the registry's end, and the start pass (if under way) is over.
    pub(crate) fn walk_listed(&mut self, listed: usize) {
        if listed < self.walk_asked {
            self.walk_start_pass = false;
        }
    }

    /// Probes `eg` at every other replica, as the sweep probes an idle group, unless a
    /// task runs for it already.
    pub(crate) fn probe_idle(&mut self, now: Time, eg: &EgId, sends: &mut Vec<(NodeId, Message)>) {
        if !self.tasks.contains_key(eg) {
            self.probe(now, eg.clone(), ProbeFor::Sweep, sends);
        }
    }

    /// A voter catch-up pass's probe of `eg` (`here`: this replica's own state of it):
    /// asks every other member of the set for its log state, then answers
    /// [`SweepAction::Hold`] — and, if lacking, settles the positions the voters lack
    /// (or asks for a snapshot). `None` if the sweep is busy with `eg` (ask again once
    /// it is not); the answer at once if there is no one else to ask.
    pub(crate) fn hold(
        &mut self,
        now: Time,
        eg: &EgId,
        here: LogState,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Option<Vec<SweepAction>> {
        if self.busy(eg) {
            return None;
        }
        if self.others(eg).is_empty() {
            return Some(self.held(now, eg, here, BTreeMap::new(), sends));
        }
        self.probe(now, eg.clone(), ProbeFor::Hold, sends);
        Some(Vec::new())
    }

    /// The position `eg` is being caught up to from the peers (settled, or installed
    /// from a snapshot), if it is, or was when its last install did not happen.
    pub(crate) fn catch_up_target(&self, eg: &EgId) -> Option<Position> {
        let task = match self.tasks.get(eg) {
            Some(Task::CatchUp(catch_up)) => Some(catch_up.target()),
            Some(Task::Install { target, .. }) => Some(*target),
            _ => None,
        };
        task.max(self.unreached.get(eg).copied())
    }

    /// `eg`'s install from `source` of what it applied through `target` did not happen.
    fn install_failed(
        &mut self,
        eg: EgId,
        (source, target): (ReplicaId, Position),
        why: InstallFailure,
    ) -> SweepAction {
        self.finish(&eg);
        if self.unreached.len() >= UNREACHED_MAX && !self.unreached.contains_key(&eg) {
            self.unreached.clear();
        }
        self.unreached.insert(eg.clone(), target);
        SweepAction::InstallFailed { eg, source, why }
    }

    /// When the sweep next wants a tick.
    pub(crate) fn next_wake(&self) -> Time {
        let tasks = self.tasks.values().filter_map(|t| match t {
            Task::CatchUp(catch_up) => catch_up.deadline(),
            Task::Probe { deadline, .. } | Task::Install { deadline, .. } => Some(*deadline),
        });
        tasks
            .chain(self.wiring.lock_deadline())
            .chain(Some(self.next_sweep))
            .min()
            .unwrap_or(self.next_sweep)
    }

    /// Time passed: drives the tasks, and every `interval` looks at every loaded group.
    pub(crate) fn on_tick<'a>(
        &mut self,
        now: Time,
        groups: impl Iterator<Item = &'a GroupLog>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Vec<SweepAction> {
        let mut actions = Vec::new();
        let (failed, retries) = self.wiring.lock_client().on_tick(now);
        sends.extend(
            retries
                .into_iter()
                .map(|s| (NodeId::LockNode(s.to), Message::LockRequest(s.request))),
        );
        for outcome in failed {
            self.on_lock_outcome(now, outcome, sends);
        }
        let groups: Vec<&GroupLog> = groups.collect();
        let state_here = |eg: &EgId| groups.iter().find(|g| g.eg() == eg).map(|g| g.log_state());
        let expired: Vec<EgId> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t, Task::Probe { deadline, .. } | Task::Install { deadline, .. } if *deadline <= now))
            .map(|(eg, _)| eg.clone())
            .collect();
        for eg in expired {
            if let Some(&Task::Install { source, target, .. }) = self.tasks.get(&eg) {
                let why = InstallFailure::NoAnswer;
                actions.push(self.install_failed(eg, (source, target), why));
            } else {
                actions.extend(self.probed(now, &eg, state_here(&eg), sends));
            }
        }
        let due: Vec<EgId> = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                matches!(t, Task::CatchUp(catch_up) if catch_up.deadline().is_some_and(|d| d <= now))
            })
            .map(|(eg, _)| eg.clone())
            .collect();
        for eg in due {
            self.drive(now, &eg, sends, |catch_up, ctx| catch_up.on_tick(ctx));
        }
        if now >= self.next_sweep {
            self.next_sweep = now + self.config.interval;
            self.sweep(now, &groups, sends);
        }
        actions
    }

    fn sweep(&mut self, now: Time, groups: &[&GroupLog], sends: &mut Vec<(NodeId, Message)>) {
        let mut pending = BTreeSet::new();
        for group in groups {
            let stuck: Vec<Position> = group
                .slots()
                .filter(|(p, s)| *p > group.visible() && !s.visible)
                .map(|(p, _)| p)
                .collect();
            pending.extend(stuck.iter().map(|p| (group.eg().clone(), *p)));
            let abandoned = stuck
                .iter()
                .filter(|p| self.pending_last.contains(&(group.eg().clone(), **p)))
                .max();
            let busy = self.tasks.contains_key(group.eg()) || self.failed.contains(group.eg());
            if let (Some(&target), false) = (abandoned, busy) {
                self.catch_up(
                    now,
                    group.eg().clone(),
                    group.visible().next(),
                    target,
                    sends,
                );
            }
        }
        self.pending_last = pending;
        for group in groups {
            if group.rejoin() == Rejoin::Uncleared {
                self.clear(now, group.eg().clone(), sends);
            }
        }
        // A group whose catch-up failed is probed now (it may need a snapshot).
        let failed: Vec<EgId> = std::mem::take(&mut self.failed).into_iter().collect();
        for eg in failed {
            if self.tasks.contains_key(&eg) || !groups.iter().any(|g| *g.eg() == eg) {
                continue;
            }
            self.probe(now, eg, ProbeFor::Sweep, sends);
        }
        self.probe_due(now, groups, sends);
        // The start pass's listing of the other replicas' registries (`peer_listing`).
        if !self.peers.started() {
            let topology = &self.config.proposer.topology;
            let sources = peer_listing::sources(topology, self.me, self.wiring.placement());
            self.peers.start(sources);
        }
        if !self.peers.over() {
            let (wiring, timeout) = (&mut self.wiring, self.config.proposer.timeouts.rpc);
            self.peers
                .on_sweep(now, timeout, || wiring.unrouted_id(), sends);
        }
        // Probe one idle group per sweep, round robin, at every other replica: from the
        // registry walk with a bounded cache (many a sweep during its start pass, see
        // `take_walk_due`), else from the loaded groups.
        if self.walk {
            self.walk_due = true;
            return;
        }
        let idle: Vec<&&GroupLog> = groups
            .iter()
            .filter(|g| !self.tasks.contains_key(g.eg()))
            .collect();
        if idle.is_empty() {
            return;
        }
        self.cursor += 1;
        let eg = idle[self.cursor % idle.len()].eg().clone();
        self.probe(now, eg, ProbeFor::Sweep, sends);
    }

    /// Probes the loaded groups that cannot wait for their round-robin turn (one group
    /// a sweep, so with many groups each came seldom): those whose logs outgrew
    /// [`SweepConfig::probe_above`], so that truncation keeps up with busy groups —
    /// while every replica applies, a group's log holds about `probe_above` positions
    /// plus what one sweep interval adds — and those lacking chosen positions
    /// ([`GroupLog::lacks_chosen_positions`]: a replica back from a fault catches up at
    /// its next sweep, not one group a sweep). Up to [`DUE_PROBES_MAX`] of them.
    /// `crates/paxos/tests/truncation_pace.rs` and `tests/it/truncation_pace.rs` check
    /// both.
    fn probe_due(&mut self, now: Time, groups: &[&GroupLog], sends: &mut Vec<(NodeId, Message)>) {
        let outgrown =
            |g: &GroupLog| g.visible().0.saturating_sub(g.truncated().0) > self.config.probe_above;
        let mut due: Vec<&GroupLog> = groups
            .iter()
            .copied()
            .filter(|g| outgrown(g) || g.lacks_chosen_positions())
            .filter(|g| !self.tasks.contains_key(g.eg()))
            .collect();
        if due.len() > DUE_PROBES_MAX {
            // More are due than a sweep probes — some replica is down, so the probes
            // cannot truncate and the same groups stay due: the groups lacking
            // positions first (their catch-up needs no answer from the replica that is
            // down), then the others from a place that moves at every such sweep, so
            // that none waits for ever.
            let (mut lacking, mut others): (Vec<&GroupLog>, Vec<&GroupLog>) =
                due.into_iter().partition(|g| g.lacks_chosen_positions());
            lacking.truncate(DUE_PROBES_MAX);
            let room = DUE_PROBES_MAX - lacking.len();
            if !others.is_empty() {
                let start = self.due_cursor % others.len();
                self.due_cursor = start + room;
                others.rotate_left(start);
            }
            others.truncate(room);
            due = lacking;
            due.extend(others);
        }
        let due: Vec<EgId> = due.iter().map(|g| g.eg().clone()).collect();
        for eg in due {
            self.probe(now, eg, ProbeFor::Sweep, sends);
        }
    }

    /// Starts clearing an uncleared group (unless something else runs for it; the
    /// next sweep tries again).
    pub(crate) fn clear(&mut self, now: Time, eg: EgId, sends: &mut Vec<(NodeId, Message)>) {
        if !self.tasks.contains_key(&eg) {
            self.probe(now, eg, ProbeFor::Clear, sends);
        }
    }

    /// `eg`'s replica set by this replica's placement (a slot removed from the group's
    /// range is neither probed nor waited for).
    fn replica_set(&self, eg: &EgId) -> ReplicaSet<'_> {
        ReplicaSet::of(&self.config.proposer.topology, self.wiring.placement(), eg)
    }

    /// The other members of `eg`'s replica set.
    fn others(&self, eg: &EgId) -> Vec<ReplicaId> {
        let mut others = self.replica_set(eg).ids();
        others.retain(|r| *r != self.me);
        others
    }

    fn probe(
        &mut self,
        now: Time,
        eg: EgId,
        purpose: ProbeFor,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let others = self.others(&eg);
        if others.is_empty() {
            return;
        }
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        let mut asked = BTreeMap::new();
        for r in others {
            let request_eg = eg.clone();
            asked.insert(
                ctx.send_replica(r, |id| ReplicaRequest::LogState { id, eg: request_eg }),
                r,
            );
        }
        let deadline = now + self.config.proposer.timeouts.rpc;
        self.tasks.insert(
            eg,
            Task::Probe {
                asked,
                states: BTreeMap::new(),
                deadline,
                purpose,
            },
        );
    }

    /// A probe is over (every replica answered, or time ran out). Clearing: with a
    /// majority of the other voters' states, the highest position among them is the
    /// rejoin floor. Then: install a snapshot if what this replica lacks is truncated
    /// somewhere, else catch up to the furthest visible position seen; and if every
    /// replica reported its state, truncate below what every full and read-only replica
    /// applied and every witness holds — keeping the last such slot, so the next
    /// position's leader stays known, and `log_kept` more for watchers.
    fn probed(
        &mut self,
        now: Time,
        eg: &EgId,
        here: Option<LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Vec<SweepAction> {
        let Some(Task::Probe {
            states, purpose, ..
        }) = self.tasks.remove(eg)
        else {
            return Vec::new();
        };
        self.wiring.forget(eg);
        let Some(here) = here else {
            return Vec::new();
        };
        if purpose == ProbeFor::Hold {
            return self.held(now, eg, here, states, sends);
        }
        let mut actions = Vec::new();
        if purpose == ProbeFor::Clear {
            let set = self.replica_set(eg);
            // A majority of the voters counted over the set this replica's placement
            // has: with a slot removed and a proposer still counting it, any majority
            // of the old set holding this replica still meets them (module doc of
            // `crate::replica_set`).
            let voters = states.keys().filter(|r| set.is_voter(**r)).count();
            if voters < set.majority() {
                return actions;
            }
            let floor = states.values().map(|s| s.highest).max();
            actions.push(SweepAction::Clear(
                eg.clone(),
                floor.unwrap_or(Position::NONE),
            ));
        }
        // The next position it lacks is truncated at a replica that answered: a
        // snapshot (any replica can take one, a truncated one by listing the data it
        // stores first; see `GroupLog::install`).
        let gone = states.values().map(|s| s.truncated).max();
        if gone.is_some_and(|gone| gone > here.visible) {
            self.request_snapshot(now, eg, &here, &states, sends);
            return actions;
        }
        let furthest = states
            .values()
            .map(|s| s.visible)
            .max()
            .unwrap_or(Position::NONE);
        if furthest > here.visible {
            self.catch_up(now, eg.clone(), here.visible.next(), furthest, sends);
        }
        // Truncate once every other member of the set reported (one asked before a
        // removal, and removed since, does not stand in for one still in) — or,
        // without some member's report, once the log outgrew the outage bound.
        let others = self.others(eg);
        let everyone_answered = others.iter().all(|r| states.contains_key(r));
        let held = here.visible.0.saturating_sub(here.truncated.0);
        if !everyone_answered && held <= self.config.outage_log_max {
            return actions;
        }
        let topology = &self.config.proposer.topology;
        let kept = |r: ReplicaId, s: &LogState| {
            if topology.kind(r) == Some(ReplicaKind::Witness) {
                s.visible
            } else {
                s.applied
            }
        };
        let floor = states
            .iter()
            .filter(|(r, _)| others.contains(r))
            .map(|(r, s)| kept(*r, s))
            .chain(Some(kept(self.me, &here)))
            .min();
        let Some(floor) = floor else {
            return actions;
        };
        let mut through = Position(floor.0.saturating_sub(1 + self.config.log_kept));
        if !everyone_answered {
            // Half the bound stays, so that the next such truncation comes after as
            // many positions again, not at every sweep.
            let half = here
                .visible
                .0
                .saturating_sub(self.config.outage_log_max / 2);
            through = through.min(Position(half));
        }
        if through > here.truncated {
            actions.push(SweepAction::Truncate(eg.clone(), through));
        }
        actions
    }

    /// A voter catch-up pass's probe is over: judges whether a majority of the voters
    /// hold the group's log, and if not settles from the lowest position a voter
    /// lacks (each settle marks the position visible at every member) up to the
    /// highest any voter knew of — or, if what this replica lacks is truncated
    /// everywhere it asked, asks for a snapshot first.
    fn held(
        &mut self,
        now: Time,
        eg: &EgId,
        here: LogState,
        mut states: BTreeMap<ReplicaId, LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Vec<SweepAction> {
        states.insert(self.me, here);
        let (hold, lowest_visible, highest) = hold_of(&self.replica_set(eg), &states);
        if hold == Hold::Lacking {
            let gone = states.values().map(|s| s.truncated).max();
            if gone.is_some_and(|gone| gone > here.visible) {
                states.remove(&self.me);
                self.request_snapshot(now, eg, &here, &states, sends);
            } else {
                let from = lowest_visible.max(here.truncated).next();
                self.catch_up(now, eg.clone(), from, highest, sends);
            }
        }
        vec![SweepAction::Hold(eg.clone(), hold)]
    }

    /// Asks the replica with data that applied the most for a snapshot, if that is
    /// beyond what this replica holds.
    fn request_snapshot(
        &mut self,
        now: Time,
        eg: &EgId,
        here: &LogState,
        states: &BTreeMap<ReplicaId, LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let topology = &self.config.proposer.topology;
        let source = states
            .iter()
            .filter(|(r, s)| {
                topology.kind(**r) != Some(ReplicaKind::Witness) && s.applied > here.visible
            })
            .max_by_key(|(_, s)| s.applied)
            .map(|(r, s)| (*r, s.applied));
        let Some((source, target)) = source else {
            return;
        };
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        let request_eg = eg.clone();
        ctx.send_replica(source, |id| ReplicaRequest::Snapshot { id, eg: request_eg });
        let deadline = now + self.config.proposer.timeouts.rpc;
        self.tasks.insert(
            eg.clone(),
            Task::Install {
                deadline,
                source,
                target,
            },
        );
    }

    /// Settles `next..=target` of `eg` from the peers; the task ends when every
    /// position is settled (or one could not be: a later sweep tries again).
    fn catch_up(
        &mut self,
        now: Time,
        eg: EgId,
        next: Position,
        target: Position,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        let (catch_up, progress) = CatchUp::start(
            &mut ctx,
            eg.clone(),
            next,
            target,
            None,
            CATCH_UP_IN_FLIGHT_MAX,
        );
        match progress {
            CatchUpProgress::Running => {
                self.tasks.insert(eg, Task::CatchUp(catch_up));
            }
            CatchUpProgress::Failed => {
                self.finish(&eg);
                self.failed.insert(eg);
            }
            CatchUpProgress::Done { .. } => self.finish(&eg),
        }
    }

    fn finish(&mut self, eg: &EgId) {
        self.tasks.remove(eg);
        self.wiring.forget(eg);
    }

    /// Hands an event to `eg`'s catch-up, and ends the task once it is done or failed.
    fn drive(
        &mut self,
        now: Time,
        eg: &EgId,
        sends: &mut Vec<(NodeId, Message)>,
        f: impl FnOnce(&mut CatchUp, &mut Ctx<'_, EgId>) -> CatchUpProgress,
    ) {
        let Some(Task::CatchUp(catch_up)) = self.tasks.get_mut(eg) else {
            return;
        };
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        match f(catch_up, &mut ctx) {
            CatchUpProgress::Running => {}
            CatchUpProgress::Failed => {
                self.finish(eg);
                self.failed.insert(eg.clone());
            }
            CatchUpProgress::Done { .. } => self.finish(eg),
        }
    }

    /// A reply to one of the sweep's requests; `here` is this replica's own state of a
    /// group. Returns what a finished probe or snapshot request decided.
    pub(crate) fn on_replica_reply(
        &mut self,
        now: Time,
        from: ReplicaId,
        reply: ReplicaReply,
        here: impl Fn(&EgId) -> Option<LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Vec<SweepAction> {
        if let ReplicaReply::Groups { id, groups } = &reply
            && self.peers.on_groups(*id, groups)
        {
            return vec![SweepAction::PeersHold(groups.clone())];
        }
        let Some(eg) = self.wiring.route(reply.id()).cloned() else {
            return Vec::new();
        };
        match self.tasks.get_mut(&eg) {
            Some(&mut Task::Install { source, target, .. }) => match reply {
                ReplicaReply::Snapshot { at, slot, rows, .. } => {
                    self.finish(&eg);
                    self.unreached.remove(&eg);
                    return vec![SweepAction::Install { eg, at, slot, rows }];
                }
                ReplicaReply::Error { error, .. } => {
                    let why = InstallFailure::Refused(error);
                    return vec![self.install_failed(eg, (source, target), why)];
                }
                _ => self.finish(&eg),
            },
            Some(Task::Probe { asked, states, .. }) => {
                asked.remove(&reply.id());
                if let ReplicaReply::LogState { state, .. } = reply {
                    states.insert(from, state);
                }
                if asked.is_empty() {
                    return self.probed(now, &eg, here(&eg), sends);
                }
            }
            Some(Task::CatchUp(_)) => {
                self.drive(now, &eg, sends, |catch_up, ctx| {
                    catch_up.on_replica_reply(ctx, from, reply)
                });
            }
            None => {}
        }
        Vec::new()
    }

    /// A coordinator's acknowledgement of an invalidate the sweep sent.
    pub(crate) fn on_coordinator_reply(
        &mut self,
        now: Time,
        from: ReplicaId,
        reply: CoordinatorReply,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let id = reply.id();
        let Some(eg) = self.wiring.route(id).cloned() else {
            return;
        };
        self.drive(now, &eg, sends, |catch_up, ctx| {
            catch_up.on_coordinator_reply(ctx, from, reply)
        });
    }

    /// A lock service response for the sweep.
    pub(crate) fn on_lock_response(
        &mut self,
        now: Time,
        from: megastore_types::LockNodeId,
        response: megastore_lock::LockResponse,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        match self.wiring.lock_client().on_response(now, from, response) {
            Ok(outcome) => self.on_lock_outcome(now, outcome, sends),
            Err(Some(retry)) => sends.push((
                NodeId::LockNode(retry.to),
                Message::LockRequest(retry.request),
            )),
            Err(None) => {}
        }
    }

    fn on_lock_outcome(
        &mut self,
        now: Time,
        outcome: LockOutcome,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let Some(eg) = self.wiring.lock_route(outcome.id).cloned() else {
            return;
        };
        self.drive(now, &eg, sends, |catch_up, ctx| {
            catch_up.on_lock_outcome(ctx, outcome.id, outcome.result)
        });
    }
}
