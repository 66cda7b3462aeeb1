//! The replica as a pure state machine: acceptor, visibility marks, apply, log state
//! and data reads for every entity group it holds, and watchers' long polls, held
//! until their group moves (`awaiting`).
//!
//! ```text
//!   Input::Message ──► Replica::step ──► Output::Persist (root row, synced)
//!   Input::Loaded  ──►               ──► Output::Apply   (data rows + applied marker)
//!   Input::Tick    ──►               ──► Output::Send / ReadData / Load / WakeAt
//! ```
//!
//! Outputs run in order, and a `Send` may leave only once every `Persist` before it
//! is durable: that is how "reply only after the state it depends on is durable" is
//! kept. Hosts do not carry outputs out themselves: [`Replica::step_into`] does, into a
//! [`Batch`] whose messages only [`Batch::release`] hands out, after one sync for
//! however many steps the batch took (`driver`).
//!
//! With [`ReplicaConfig::cache_groups`] it holds only that many quiescent groups in
//! memory (`cache`): a group's state is its root row read back, so one that leaves is
//! loaded again on its next request. It keeps the registry of its groups and the open
//! index of those with work left (`registry`), and at its first step loads what the
//! open index lists (docs/protocol.md, "Groups in memory").
//!
//! After a voter change of a range, a voter runs the catch-up pass over the range's
//! groups when the operator asks ([`Input::CatchUpVoters`], `voter_pass`), through its
//! sweep's probes and catch-ups.

mod awaiting;
mod cache;
mod checks;
mod driver;
mod group;
mod move_deltas;
mod peer_listing;
mod placed;
mod range_copy;
mod range_state;
mod registry;
mod sweep;
mod voter_pass;

use std::collections::{BTreeMap, BTreeSet};

use megastore_placement::{Placement, RangeId, ServerPlacement, Version};
use megastore_rowstore::{Durability, KeyRange, Row, RowMutation, RowRead, ScanOptions};
use megastore_types::{
    EgId, NodeId, Position, ReplicaId, ReplicaInfo, ReplicaKind, Time, Topology,
};

pub use awaiting::{AWAIT_MAX, AWAITING_MAX};
pub use driver::{Batch, BatchCounts, DRIVER_CLIENT, FailedInstall, Released, load_group};
pub use group::{CHOSEN_REMEMBERED, GroupLog, GroupSnapshot, HISTORY_KEPT, Proposal, Rejoin};
pub use move_deltas::{CHANGED_GROUPS_MAX, ChangeToken, CopyMark};
pub use placed::{SERVER_PLACEMENT_ROW, ServerPlacementError, load_server_placement, span_keys};
pub use range_copy::{RangeCopy, copy_range, export_pages};
pub use range_state::{group_state_spans, range_bytes, retire_range};
pub use registry::{
    GroupList, OPEN_PREFIX, REGISTRY_PREFIX, list, list_groups, register_group, registered_in,
};
pub use sweep::{DUE_PROBES_MAX, InstallFailure, SweepConfig, TRUNCATE_EVERY};
pub use voter_pass::{VoterPassHeld, VoterPassRefused, VoterPassReport};

use awaiting::{Awaiter, Awaiting};
use cache::Recency;
use sweep::{SweepAction, Sweeper};

use crate::bugs::ProtocolBugs;
use crate::cells::{SlotRecord, StoredGroup};
use crate::entry::{data_range, global_index_range, group_of_root_row, root_row};
use crate::messages::{
    DataQuery, LIST_GROUPS_MAX, Message, ReadAt, ReplicaError, ReplicaReply, ReplicaRequest,
};

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// Which replica this is.
    pub id: ReplicaId,
    /// The deployment.
    pub topology: Topology,
    /// Simulator-only mistakes.
    pub bugs: ProtocolBugs,
    /// Finishing abandoned positions and catching up from peers (`None`: off).
    pub sweep: Option<SweepConfig>,
    /// This replica lost its store (a wiped disk, a replacement machine): every group
    /// it has not cleared since is treated as possibly voted on before and gets no vote
    /// until the sweep learns how far the other voters got (the rejoin rule, see
    /// [`Rejoin`]). A server sets it when its store lacks the marker written at
    /// bootstrap; it needs the sweep.
    pub rejoining: bool,
    /// How many groups to keep loaded (`None`: every group ever touched). Past it, the
    /// least recently used group that is *quiescent* — nothing waits for it, no sweep
    /// task or held long poll names it, and its log holds nothing above `visible` nor
    /// anything visible left to apply — is dropped from memory: its root row holds all
    /// of it, and its next request loads it again. Groups that are not quiescent stay,
    /// so the loaded count can pass the bound by as many. With a bound, the sweep walks
    /// the registry ([`Output::ListGroups`]) for the groups it probes instead of going
    /// round the loaded ones.
    pub cache_groups: Option<usize>,
}

/// An event for the replica.
#[derive(Debug, Clone)]
pub enum Input {
    /// A message arrived.
    Message {
        /// Its sender.
        from: NodeId,
        /// The message.
        message: Message,
    },
    /// The root row the replica asked for with [`Output::Load`] (`None`: no such row).
    Loaded {
        /// The group.
        eg: EgId,
        /// Its root row, read at the latest state.
        row: Option<Row>,
        /// Its prepared records' rows ([`crate::two_phase::records_range`]) whose locks
        /// column is live at the latest state (none read at a witness).
        prepared: Vec<Vec<u8>>,
    },
    /// The groups the replica asked for with [`Output::ListGroups`].
    Listed {
        /// Which list they are from.
        which: GroupList,
        /// Up to its `limit`, in key order (fewer: the list ended).
        groups: Vec<EgId>,
        /// The output's `for_peer`.
        for_peer: Option<(NodeId, u64)>,
    },
    /// The group's data rows, as the store holds them, that the replica asked for with
    /// [`Output::ListData`] for a snapshot install.
    DataListed {
        /// The group.
        eg: EgId,
        /// Its data rows at the latest state (visible cells only).
        rows: Vec<Row>,
    },
    /// Time passed.
    Tick,
    /// The server read this placement from the lock service (a placed replica only,
    /// see [`Replica::placed`]; older than the one it has: ignored).
    Placement(Placement),
    /// The operator asks this server, the source of move `move_id`, to freeze `range`
    /// (a placed replica only; see [`Replica::placed`]).
    Freeze {
        /// The range.
        range: RangeId,
        /// The move.
        move_id: Version,
    },
    /// The operator asks this voter to run the catch-up pass over `range` for its
    /// voter change at `changed_at` (`voter_pass.rs`); it ends with
    /// [`Output::VoterPassEnded`]. The host reads the newest placement first.
    CatchUpVoters {
        /// The range.
        range: RangeId,
        /// Its voter change (the placement's `Range::voters_changed`).
        changed_at: Version,
    },
    /// The registered groups the replica asked for with [`Output::ListForPass`], in
    /// key order (fewer than its `limit`: the span ended).
    VoterPassListed {
        /// The groups.
        groups: Vec<EgId>,
    },
}

/// What the replica asks its driver to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Read the group's root row and, with `records`, its prepared records' rows, and
    /// feed them back as [`Input::Loaded`].
    Load {
        /// The group.
        eg: EgId,
        /// Its root row key.
        root_row: Vec<u8>,
        /// Whether to read its prepared records (not at a witness).
        records: bool,
    },
    /// List up to `limit` groups of list `which` after `after` ([`list`])
    /// and feed them back as [`Input::Listed`]. The registry is listed for the sweep's
    /// walk with a bounded cache, to load every group at start without one, and to
    /// answer a peer's [`ReplicaRequest::ListGroups`]; the open index, to load the
    /// groups with work left at start with a bounded cache.
    ListGroups {
        /// Which list.
        which: GroupList,
        /// Where the listing stands (`None`: from the first group).
        after: Option<EgId>,
        /// How many.
        limit: usize,
        /// The peer whose request it answers, and the request's id (`None`: the
        /// replica's own listing).
        for_peer: Option<(NodeId, u64)>,
    },
    /// Read every data row of the group ([`crate::data_range`]) at the latest state
    /// and feed them back as [`Input::DataListed`]: a snapshot install onto a log that
    /// was truncated tombstones every column the store holds.
    ListData {
        /// The group.
        eg: EgId,
    },
    /// Write this mutation to one of the replica's lists of groups ([`GroupList`]),
    /// buffered. It needs no sync of its own: a listing goes before the state it is
    /// for, under the same sync, and an unlisting may be lost.
    Index {
        /// The mutation.
        mutation: RowMutation,
    },
    /// Write this root-row mutation, synced. Sends after it wait until it is durable.
    Persist {
        /// The mutation.
        mutation: RowMutation,
    },
    /// Apply entries: first `global`, the copies of the entries' global index mirror
    /// writes ([`crate::entry::global_mirror_range`]) to the global index rows they
    /// name; then one atomic batch within the group's range (data rows and the
    /// `applied` marker). In that order a crash never keeps the marker without the
    /// copies. Synced when `durability` says: a mark's apply, whose `applied` marker
    /// is also the group's visible watermark ([`crate::cells::stored_visible`]), so
    /// sends after it wait until it is durable. Otherwise buffered: a lost apply is
    /// redone from the log.
    Apply {
        /// The group.
        eg: EgId,
        /// Global index rows, written before `rows`.
        global: Vec<RowMutation>,
        /// The rows.
        rows: Vec<RowMutation>,
        /// How many log entries (positions) this applies.
        entries: u64,
        /// Whether it is synced.
        durability: Durability,
    },
    /// Install a snapshot: the global index copies of its mirror (`global`, first),
    /// then one atomic batch within the group's range (data rows and the root row's
    /// new watermarks), synced; sends after it wait until it is durable.
    Install {
        /// The group.
        eg: EgId,
        /// Global index rows, written before `rows`.
        global: Vec<RowMutation>,
        /// The rows.
        rows: Vec<RowMutation>,
    },
    /// Drop the versions of the group's data rows that no read at `below` or later can
    /// see ([`megastore_rowstore::RowStore::collect_garbage`] over
    /// [`crate::data_range`]). The `collected` watermark that refuses older reads is
    /// persisted before it, so no reply can depend on versions already gone.
    CollectGarbage {
        /// The group.
        eg: EgId,
        /// Reads below this position are refused from now on.
        below: Position,
    },
    /// Drop the versions of these global index rows (each written only by one group,
    /// whose entries up to `below` were just truncated) that no read of their newest
    /// version can see: [`megastore_rowstore::RowStore::collect_garbage`] over each
    /// row alone, at `below`.
    CollectGlobalGarbage {
        /// The rows.
        rows: Vec<Vec<u8>>,
        /// Their group's truncation point.
        below: Position,
    },
    /// Read the group's data as of `at` and reply with [`answer_snapshot`].
    ReadSnapshot {
        /// Who asked.
        to: NodeId,
        /// Their request id.
        id: u64,
        /// The group.
        eg: EgId,
        /// The applied position to read at.
        at: Position,
        /// The visible entry at `at`.
        slot: SlotRecord,
    },
    /// Send a message.
    Send {
        /// To whom.
        to: NodeId,
        /// What.
        message: Message,
    },
    /// Read data (a group's, or the global index's) and reply with [`answer_read`].
    ReadData {
        /// Who asked.
        to: NodeId,
        /// Their request id.
        id: u64,
        /// The group (`None`: the global index).
        eg: Option<EgId>,
        /// The timestamp (`None`: latest).
        at: Option<Position>,
        /// What to read.
        query: DataQuery,
        /// The next position's leader to name in the answer (a settled read's).
        next_leader: Option<ReplicaId>,
        /// Whether prepared records may hold at `at` (*locks-known*): the answer then
        /// returns their locks.
        locks: bool,
    },
    /// Feed [`Input::Tick`] at this time.
    WakeAt(Time),
    /// List up to `limit` registered groups in `groups` ([`registered_in`]) and feed
    /// them back as [`Input::VoterPassListed`].
    ListForPass {
        /// The span.
        groups: KeyRange,
        /// How many.
        limit: usize,
    },
    /// A voter catch-up pass ended: hand the report to whoever asked for it.
    VoterPassEnded(VoterPassReport),
    /// A snapshot install the sweep asked `source` for did not happen: the group stays
    /// behind (its snapshot and inconsistent reads here serve older state) until a
    /// later sweep's install does. For the host's metrics and log — quiet, a replica
    /// stuck behind a group it cannot install showed nothing.
    InstallFailed {
        /// The group.
        eg: EgId,
        /// The replica asked.
        source: ReplicaId,
        /// Why.
        why: InstallFailure,
    },
    /// Write the server's placement ([`SERVER_PLACEMENT_ROW`]: the placement it judges
    /// by and its freezes), synced: sends after it wait until it is durable, and
    /// nothing after it (a retirement) is durable without it.
    PersistPlacement {
        /// The mutation.
        mutation: RowMutation,
    },
    /// Delete the rows of these groups ([`retire_range`]): the server neither holds
    /// nor receives them any more. Synced; nothing of them is in memory.
    Retire {
        /// The groups' key span.
        groups: KeyRange,
    },
}

/// See [`Replica::lag`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaLag {
    /// Groups with positions seen but not applied.
    pub groups: u64,
    /// Those positions, over every group.
    pub positions: u64,
}

enum GroupSlot {
    /// Waiting for the root row; these requests wait with it.
    Loading(Vec<(NodeId, ReplicaRequest)>),
    /// Boxed: the map of groups then holds small values, and a loaded group's state is
    /// one allocation of its own.
    Ready(Box<GroupLog>),
    /// The root row could not be read back: the group is not served until repaired.
    Failed(String),
}

/// One replica: full, witness or read-only.
pub struct Replica {
    config: ReplicaConfig,
    me: ReplicaInfo,
    groups: BTreeMap<EgId, GroupSlot>,
    sweeper: Option<Sweeper>,
    /// Groups loaded uncleared since the last step: the sweep starts clearing them.
    to_clear: Vec<EgId>,
    /// Watchers' long polls, held.
    awaiting: Awaiting,
    /// The loaded groups by last use (with [`ReplicaConfig::cache_groups`]).
    recency: Recency,
    /// Loaded groups whose root row did not exist: registered with their first
    /// persisted state (`registry`).
    unregistered: BTreeSet<EgId>,
    /// Loaded groups listed in the open index (with a bounded cache): unlisted when
    /// they leave memory.
    open_listed: BTreeSet<EgId>,
    /// The start-up listing ran (or runs): the first step begins it.
    started: bool,
    /// The last group the registry walk reached.
    walk_after: Option<EgId>,
    /// Groups the walk is loading, to probe once loaded.
    probe_when_loaded: BTreeSet<EgId>,
    /// Groups another replica's registry listed (`peer_listing`), loading: probed once
    /// loaded if this replica's store had no root row of theirs.
    probe_if_new: BTreeSet<EgId>,
    /// Groups dropped from memory so far.
    evictions: u64,
    /// The server's placement (`None`: not placed, every group is served).
    placement: Option<ServerPlacement>,
    /// The time of the step being taken.
    now: Time,
    /// The last group a debug build's step checked, when too many are in memory to
    /// check them all (`checks.rs`).
    checked_after: Option<EgId>,
    /// The voter catch-up pass under way, if one is.
    voter_pass: Option<voter_pass::VoterPass>,
    /// What a move's final copy needs to copy only what changed (`move_deltas`).
    deltas: move_deltas::MoveDeltas,
    /// Snapshots to install once the group's stored data rows are read
    /// ([`Output::ListData`]).
    installs_waiting: BTreeMap<EgId, Box<GroupSnapshot>>,
}

/// How many groups the start-up listing loads at once.
const START_PAGE: usize = 256;

/// How many pinned groups an eviction passes over in one step before giving up until
/// the next (each is moved to the recent end, so the next step sees others).
const EVICT_SKIP_MAX: usize = 64;

impl Replica {
    /// A replica with nothing loaded (at start, or after a restart).
    pub fn new(config: ReplicaConfig) -> Self {
        let me = config
            .topology
            .replica(config.id)
            .cloned()
            .expect("the replica is in its topology");
        let walk = config.cache_groups.is_some();
        let sweeper = config
            .sweep
            .clone()
            .map(|sweep| Sweeper::new(sweep, me.id, walk));
        Self {
            config,
            me,
            groups: BTreeMap::new(),
            sweeper,
            to_clear: Vec::new(),
            awaiting: Awaiting::default(),
            recency: Recency::default(),
            unregistered: BTreeSet::new(),
            open_listed: BTreeSet::new(),
            started: false,
            walk_after: None,
            probe_when_loaded: BTreeSet::new(),
            probe_if_new: BTreeSet::new(),
            evictions: 0,
            placement: None,
            now: Time(0),
            checked_after: None,
            voter_pass: None,
            deltas: move_deltas::MoveDeltas::default(),
            installs_waiting: BTreeMap::new(),
        }
    }

    /// How many groups are loaded (ready to serve, or failed to load).
    pub fn loaded_groups(&self) -> usize {
        if self.config.cache_groups.is_some() {
            return self.recency.len();
        }
        self.groups
            .values()
            .filter(|g| !matches!(g, GroupSlot::Loading(_)))
            .count()
    }

    /// How many groups were dropped from memory so far
    /// ([`ReplicaConfig::cache_groups`]).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// This replica.
    pub fn info(&self) -> &ReplicaInfo {
        &self.me
    }

    /// A loaded group's state.
    pub fn group(&self, eg: &EgId) -> Option<&GroupLog> {
        match self.groups.get(eg) {
            Some(GroupSlot::Ready(g)) => Some(g),
            _ => None,
        }
    }

    /// How far behind what it has heard of this replica's data is: the loaded groups
    /// with positions seen (accepted, promised, granted or marked visible here, or
    /// found visible at a peer by the sweep) but not applied, and how many such
    /// positions in all — what a global index scan here may miss as far as this
    /// replica knows (writes it has not heard of are not counted). Witnesses keep no
    /// data: never behind.
    pub fn lag(&self) -> ReplicaLag {
        if self.me.kind == ReplicaKind::Witness {
            return ReplicaLag::default();
        }
        self.groups().fold(ReplicaLag::default(), |lag, g| {
            let state = g.log_state();
            let seen = self
                .sweeper
                .as_ref()
                .and_then(|s| s.catch_up_target(g.eg()))
                .map_or(state.highest, |target| target.max(state.highest));
            let behind = seen.0.saturating_sub(state.applied.0);
            ReplicaLag {
                groups: lag.groups + u64::from(behind > 0),
                positions: lag.positions + behind,
            }
        })
    }

    /// Every loaded group.
    pub fn groups(&self) -> impl Iterator<Item = &GroupLog> + '_ {
        self.groups.values().filter_map(|g| match g {
            GroupSlot::Ready(g) => Some(g.as_ref()),
            _ => None,
        })
    }

    /// Handles one event. Hosts call [`Replica::step_into`], which carries the outputs
    /// out; only the driver loop sees them raw.
    pub(crate) fn step(&mut self, now: Time, input: Input) -> Vec<Output> {
        self.now = now;
        let mut out = Vec::new();
        let mut sends = Vec::new();
        let mut actions = Vec::new();
        if !self.started {
            // Load what needs looking after: with a bounded cache the groups with work
            // left, else every group.
            self.started = true;
            out.push(Output::ListGroups {
                which: self.start_list(),
                after: None,
                limit: START_PAGE,
                for_peer: None,
            });
        }
        match input {
            Input::Message {
                from,
                message:
                    Message::ReplicaRequest(ReplicaRequest::ScanGlobal {
                        id,
                        range,
                        limit,
                        reverse,
                        routed_by,
                        ..
                    }),
            } => self.scan_global(from, id, (range, limit, reverse), routed_by, &mut out),
            Input::Message {
                from,
                message:
                    Message::ReplicaRequest(ReplicaRequest::ListGroups {
                        id, after, limit, ..
                    }),
            } => out.push(Output::ListGroups {
                which: GroupList::Registered,
                after,
                limit: limit.min(LIST_GROUPS_MAX),
                for_peer: Some((from, id)),
            }),
            Input::Message {
                from,
                message: Message::ReplicaRequest(request),
            } => self.handle(from, request, &mut out),
            Input::Message {
                from: NodeId::Replica(r),
                message: Message::ReplicaReply(reply),
            } => {
                let Self {
                    sweeper, groups, ..
                } = self;
                if let Some(sweeper) = sweeper {
                    let here = |eg: &EgId| match groups.get(eg) {
                        Some(GroupSlot::Ready(g)) => Some(g.log_state()),
                        _ => None,
                    };
                    actions.extend(sweeper.on_replica_reply(now, r, reply, here, &mut sends));
                }
            }
            Input::Message {
                from: NodeId::Coordinator(r),
                message: Message::CoordinatorReply(reply),
            } => {
                if let Some(sweeper) = &mut self.sweeper {
                    sweeper.on_coordinator_reply(now, r, reply, &mut sends);
                }
            }
            Input::Message {
                from: NodeId::LockNode(n),
                message: Message::LockResponse(response),
            } => {
                if let Some(sweeper) = &mut self.sweeper {
                    sweeper.on_lock_response(now, n, response, &mut sends);
                }
            }
            Input::Message { .. } => {}
            Input::Loaded { eg, row, prepared } => {
                self.loaded(eg, row.as_ref(), prepared, &mut out)
            }
            Input::DataListed { eg, rows } => {
                let waiting = self.installs_waiting.remove(&eg);
                if let (Some(install), Some(GroupSlot::Ready(group))) =
                    (waiting, self.groups.get_mut(&eg))
                {
                    let (kind, bugs) = (self.me.kind, &self.config.bugs);
                    group.install(kind, *install, Some(&rows), bugs, &mut out);
                }
            }
            Input::Placement(placement) => self.observe_placement(placement, &mut out),
            Input::Freeze { range, move_id } => self.freeze(range, move_id, &mut out),
            Input::CatchUpVoters { range, changed_at } => {
                self.start_voter_pass(range, changed_at, &mut out)
            }
            Input::VoterPassListed { groups } => self.voter_pass_listed(groups),
            Input::Listed {
                groups,
                for_peer: Some((to, id)),
                ..
            } => reply(&mut out, to, ReplicaReply::Groups { id, groups }),
            Input::Listed {
                which,
                groups,
                for_peer: None,
            } => self.listed(which, groups, &mut out),
            Input::Tick => {
                let Self {
                    sweeper, groups, ..
                } = self;
                if let Some(sweeper) = sweeper {
                    let loaded = groups.values().filter_map(|g| match g {
                        GroupSlot::Ready(g) => Some(g.as_ref()),
                        _ => None,
                    });
                    actions.extend(sweeper.on_tick(now, loaded, &mut sends));
                    if let Some(limit) = sweeper.take_walk_due() {
                        out.push(Output::ListGroups {
                            which: GroupList::Registered,
                            after: self.walk_after.clone(),
                            limit,
                            for_peer: None,
                        });
                    }
                }
            }
        }
        for action in actions {
            match action {
                SweepAction::Truncate(eg, through) => {
                    let kept = self
                        .config
                        .sweep
                        .as_ref()
                        .map_or(HISTORY_KEPT, |s| s.history_kept);
                    if let Some(GroupSlot::Ready(group)) = self.groups.get_mut(&eg) {
                        group.truncate(self.me.kind, through, kept, &self.config.bugs, &mut out);
                    }
                }
                SweepAction::Clear(eg, floor) => {
                    if let Some(GroupSlot::Ready(group)) = self.groups.get_mut(&eg) {
                        group.clear(floor, &mut out);
                    }
                }
                SweepAction::Install { eg, at, slot, rows } => {
                    if let Some(GroupSlot::Ready(group)) = self.groups.get_mut(&eg) {
                        let kind = self.me.kind;
                        let snapshot = GroupSnapshot { at, slot, rows };
                        if group.install_needs_stored_data(kind) {
                            // Installed once the store's data rows are read (at once,
                            // within the same step's carrying out).
                            self.installs_waiting.insert(eg.clone(), Box::new(snapshot));
                            out.push(Output::ListData { eg });
                        } else {
                            group.install(kind, snapshot, None, &self.config.bugs, &mut out);
                        }
                    }
                }
                SweepAction::Hold(eg, hold) => self.voter_pass_hold(&eg, hold),
                SweepAction::PeersHold(groups) => self.peers_hold(groups, &mut out),
                SweepAction::InstallFailed { eg, source, why } => {
                    out.push(Output::InstallFailed { eg, source, why })
                }
            }
        }
        self.drive_voter_pass(&mut out);
        if let Some(sweeper) = &mut self.sweeper {
            for eg in std::mem::take(&mut self.to_clear) {
                sweeper.clear(now, eg, &mut sends);
            }
        }
        out.extend(
            sends
                .into_iter()
                .map(|(to, message)| Output::Send { to, message }),
        );
        self.answer_awaiters(now, &mut out);
        let wake = [
            self.sweeper.as_ref().map(Sweeper::next_wake),
            self.awaiting.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(wake) = wake {
            out.push(Output::WakeAt(wake));
        }
        self.index_changed_groups(&mut out);
        self.evict(&mut out);
        self.note_move_changes(&out);
        if cfg!(debug_assertions) {
            self.check_invariants_after_step();
        }
        out
    }

    /// Lists the groups this step changed where they belong, ahead of the changes: in
    /// the registry those persisted for the first time, in the open index (with a
    /// bounded cache) those the change left with work (`registry`).
    fn index_changed_groups(&mut self, out: &mut Vec<Output>) {
        let bounded = self.config.cache_groups.is_some();
        if self.unregistered.is_empty() && !bounded {
            return;
        }
        let mut listings = Vec::new();
        let mut seen = BTreeSet::new();
        for output in out.iter() {
            let eg = match output {
                Output::Persist { mutation } => group_of_root_row(&mutation.row),
                Output::Install { eg, .. } => Some(&eg.0[..]),
                _ => None,
            };
            let Some(eg) = eg.map(|eg| EgId(eg.to_vec())) else {
                continue;
            };
            if !seen.insert(eg.clone()) {
                continue;
            }
            if self.unregistered.remove(&eg) {
                listings.push(Output::Index {
                    mutation: register_group(&eg),
                });
            }
            let open = matches!(
                self.groups.get(&eg),
                Some(GroupSlot::Ready(g)) if g.unfinished(self.me.kind)
            );
            let list = bounded && !self.config.bugs.skip_open_index();
            if list && open && self.open_listed.insert(eg.clone()) {
                listings.push(Output::Index {
                    mutation: GroupList::Open.listing(&eg),
                });
            }
        }
        if !listings.is_empty() {
            listings.append(out);
            *out = listings;
        }
    }

    /// Which list the start-up listing loads: the open index with a bounded cache,
    /// else the registry.
    fn start_list(&self) -> GroupList {
        if self.config.cache_groups.is_some() {
            GroupList::Open
        } else {
            GroupList::Registered
        }
    }

    /// `eg` was used: the most recent to evict (only with a bounded cache; without one
    /// nothing is ordered).
    fn used(&mut self, eg: &EgId) {
        if self.config.cache_groups.is_some() {
            self.recency.touch(eg);
        }
    }

    /// Whether `eg` must stay loaded: it is loading, or not quiescent (see
    /// [`ReplicaConfig::cache_groups`]).
    fn pinned(&self, eg: &EgId) -> bool {
        match self.groups.get(eg) {
            Some(GroupSlot::Ready(group)) => {
                group.unfinished(self.me.kind)
                    || self.awaiting.holds(eg)
                    || self.sweeper.as_ref().is_some_and(|s| s.busy(eg))
            }
            Some(GroupSlot::Failed(_)) => false,
            Some(GroupSlot::Loading(_)) | None => true,
        }
    }

    /// Drops least recently used quiescent groups from memory while more than
    /// [`ReplicaConfig::cache_groups`] are loaded. Everything they hold is in their
    /// root rows already — this step's writes are among the outputs the driver carries
    /// out before it reads any root row again.
    fn evict(&mut self, out: &mut Vec<Output>) {
        let Some(limit) = self.config.cache_groups else {
            return;
        };
        if self.config.bugs.evict_dirty_group() && self.recency.len() > limit {
            self.evict_dirty(out);
        }
        let mut skipped = 0;
        while self.recency.len() > limit && skipped < EVICT_SKIP_MAX {
            let eg = self.recency.oldest().expect("over the bound").clone();
            if self.pinned(&eg) {
                self.recency.touch(&eg);
                skipped += 1;
                continue;
            }
            if self.open_listed.remove(&eg) {
                out.push(Output::Index {
                    mutation: GroupList::Open.unlisting(&eg),
                });
            }
            self.groups.remove(&eg);
            self.recency.remove(&eg);
            self.evictions += 1;
        }
    }

    /// The `evict-dirty-group` knob: a group this step changed is dropped, and its
    /// writes with it (root row, applies), as a write-back cache that loses a dirty
    /// entry would.
    fn evict_dirty(&mut self, out: &mut Vec<Output>) {
        let dirty = out.iter().find_map(|o| match o {
            Output::Persist { mutation } => group_of_root_row(&mutation.row)
                .map(|eg| EgId(eg.to_vec()))
                .filter(|eg| matches!(self.groups.get(eg), Some(GroupSlot::Ready(_)))),
            _ => None,
        });
        if let Some(eg) = dirty {
            let row = root_row(&eg);
            out.retain(|o| match o {
                Output::Persist { mutation } => mutation.row != row,
                Output::Apply { eg: of, .. }
                | Output::Install { eg: of, .. }
                | Output::CollectGarbage { eg: of, .. } => *of != eg,
                _ => true,
            });
            self.open_listed.remove(&eg);
            self.groups.remove(&eg);
            self.recency.remove(&eg);
            self.evictions += 1;
        }
    }

    /// Groups listed: the start-up listing's (loaded, and the next page asked for), or
    /// the registry walk's next groups with a bounded cache (each probed by the sweep,
    /// loaded first if it is not).
    fn listed(&mut self, which: GroupList, groups: Vec<EgId>, out: &mut Vec<Output>) {
        let walk = which == GroupList::Registered && self.config.cache_groups.is_some();
        if walk {
            self.walk_after = groups.last().cloned();
            if let Some(sweeper) = &mut self.sweeper {
                sweeper.walk_listed(groups.len());
            }
        } else if groups.len() == START_PAGE {
            out.push(Output::ListGroups {
                which,
                after: groups.last().cloned(),
                limit: START_PAGE,
                for_peer: None,
            });
        }
        for eg in groups {
            if self.refusal(&eg).is_some() {
                // Listed here, placed elsewhere (its rows wait for retirement).
                continue;
            }
            if which == GroupList::Open {
                self.open_listed.insert(eg.clone());
            }
            match self.groups.get(&eg) {
                Some(GroupSlot::Ready(_)) if walk => self.probe(&eg, out),
                Some(GroupSlot::Loading(_)) if walk => {
                    self.probe_when_loaded.insert(eg);
                }
                Some(_) => {}
                None => {
                    if walk {
                        self.probe_when_loaded.insert(eg.clone());
                    }
                    let from = NodeId::Client(DRIVER_CLIENT);
                    self.handle(from, ReplicaRequest::LogState { id: 0, eg }, out);
                }
            }
        }
    }

    /// Groups another replica holds (`peer_listing`): each this replica serves but has
    /// never persisted — its store has no root row of it, so the group was first
    /// written while it was away — is probed (loaded first if it is not), which
    /// catches it up or installs a snapshot. Groups it holds are left to its own
    /// registry walk.
    fn peers_hold(&mut self, groups: Vec<EgId>, out: &mut Vec<Output>) {
        for eg in groups {
            if self.refusal(&eg).is_some() {
                continue;
            }
            match self.groups.get(&eg) {
                Some(GroupSlot::Ready(_)) if self.unregistered.contains(&eg) => {
                    self.probe(&eg, out)
                }
                Some(GroupSlot::Loading(_)) => {
                    self.probe_if_new.insert(eg);
                }
                Some(_) => {}
                None => {
                    self.probe_if_new.insert(eg.clone());
                    let from = NodeId::Client(DRIVER_CLIENT);
                    self.handle(from, ReplicaRequest::LogState { id: 0, eg }, out);
                }
            }
        }
    }

    /// Has the sweep probe `eg` at the other replicas, unless it is busy with it.
    fn probe(&mut self, eg: &EgId, out: &mut Vec<Output>) {
        let Some(sweeper) = &mut self.sweeper else {
            return;
        };
        let mut sends = Vec::new();
        sweeper.probe_idle(self.now, eg, &mut sends);
        out.extend(
            sends
                .into_iter()
                .map(|(to, message)| Output::Send { to, message }),
        );
    }

    /// Answers the held long polls whose group moved past them or whose wait ended.
    fn answer_awaiters(&mut self, now: Time, out: &mut Vec<Output>) {
        let Self {
            awaiting, groups, ..
        } = self;
        let ready = |eg: &EgId| match groups.get(eg) {
            Some(GroupSlot::Ready(g)) => Some(g.as_ref()),
            _ => None,
        };
        for (eg, awaiter) in awaiting.due(now, |eg| ready(eg).map(GroupLog::visible)) {
            let id = awaiter.id;
            let answer = match ready(&eg) {
                Some(g) if g.rejoin() != Rejoin::Uncleared => ReplicaReply::LogState {
                    id,
                    state: g.log_state(),
                },
                Some(_) => ReplicaReply::Error {
                    id,
                    error: ReplicaError::Rejoining,
                },
                None => ReplicaReply::Error {
                    id,
                    error: ReplicaError::NotServing,
                },
            };
            reply(out, awaiter.from, answer);
        }
    }

    fn loaded(
        &mut self,
        eg: EgId,
        row: Option<&Row>,
        prepared: Vec<Vec<u8>>,
        out: &mut Vec<Output>,
    ) {
        let Some(GroupSlot::Loading(waiting)) = self.groups.remove(&eg) else {
            return;
        };
        let walked = self.probe_when_loaded.remove(&eg);
        let new_here = self.probe_if_new.remove(&eg) && row.is_none();
        let probe = walked || new_here;
        match StoredGroup::from_row(row) {
            Ok(stored) => {
                let bugs = self.config.bugs;
                // A read-only replica never voted: nothing to clear.
                let rejoining = self.config.rejoining
                    && self.me.kind != ReplicaKind::ReadOnly
                    && !bugs.rejoin_as_voter();
                let chosen_cells = stored.chosen_cells;
                let grant_cells = !stored.grants.is_empty();
                let mut group = GroupLog::load(eg.clone(), stored, prepared, &bugs, rejoining);
                group.rewrite_older_layout(chosen_cells, grant_cells, out);
                if group.rejoin() == Rejoin::Uncleared {
                    self.to_clear.push(eg.clone());
                }
                // Visible positions whose apply was lost in a crash are applied again.
                if self.me.kind != ReplicaKind::Witness {
                    group.apply_ready(out);
                }
                if row.is_none() {
                    self.unregistered.insert(eg.clone());
                }
                // Work left that the open index does not show (written before there
                // was one): listed now.
                if self.config.cache_groups.is_some()
                    && !bugs.skip_open_index()
                    && group.unfinished(self.me.kind)
                    && self.open_listed.insert(eg.clone())
                {
                    out.push(Output::Index {
                        mutation: GroupList::Open.listing(&eg),
                    });
                }
                self.used(&eg);
                self.groups
                    .insert(eg.clone(), GroupSlot::Ready(Box::new(group)));
                if probe {
                    self.probe(&eg, out);
                }
                for (from, request) in waiting {
                    self.handle(from, request, out);
                }
            }
            Err(e) => {
                let error = ReplicaError::Storage(e.to_string());
                for (from, request) in waiting {
                    reply(
                        out,
                        from,
                        ReplicaReply::Error {
                            id: request.id(),
                            error: error.clone(),
                        },
                    );
                }
                self.used(&eg);
                self.groups.insert(eg, GroupSlot::Failed(e.to_string()));
            }
        }
    }

    /// A global index scan (`scan`: its rows, limit and order): no group's state is
    /// involved — the store holds what this server applied of its groups — so it is
    /// answered at once (not on witnesses, which keep no data). A scan that chose its
    /// servers by an older placement than this server's (`routed_by`) is refused: the
    /// servers holding the slot may have changed since.
    fn scan_global(
        &self,
        from: NodeId,
        id: u64,
        (range, limit, reverse): (KeyRange, Option<usize>, bool),
        routed_by: Option<Version>,
        out: &mut Vec<Output>,
    ) {
        let global = global_index_range();
        let newer = self
            .placement
            .as_ref()
            .map(|p| p.view().version())
            .filter(|mine| routed_by.is_some_and(|asked| asked < *mine));
        let error = if self.me.kind == ReplicaKind::Witness {
            Some(ReplicaError::NotServing)
        } else if !(global.contains(&range.start)
            && range
                .end
                .as_ref()
                .is_some_and(|end| Some(end) <= global.end.as_ref()))
        {
            Some(ReplicaError::BadQuery(
                "a global index scan stays within the global index rows (0xFD…)".into(),
            ))
        } else {
            newer.map(|version| ReplicaError::PlacementNewer { version })
        };
        match error {
            Some(error) => reply(out, from, ReplicaReply::Error { id, error }),
            None => out.push(Output::ReadData {
                to: from,
                id,
                eg: None,
                at: None,
                next_leader: None,
                locks: false,
                query: DataQuery::Scan {
                    range,
                    limit,
                    reverse,
                },
            }),
        }
    }

    fn handle(&mut self, from: NodeId, request: ReplicaRequest, out: &mut Vec<Output>) {
        let eg = request
            .eg()
            .expect("every request but a global scan and a listing names its group")
            .clone();
        if let Some(error) = self.refusal(&eg) {
            let id = request.id();
            reply(out, from, ReplicaReply::Error { id, error });
            return;
        }
        if matches!(self.groups.get(&eg), Some(GroupSlot::Ready(_))) {
            self.used(&eg);
        }
        let group = match self.groups.get_mut(&eg) {
            None => {
                out.push(Output::Load {
                    eg: eg.clone(),
                    root_row: root_row(&eg),
                    // A witness keeps no data, so no records, and serves no reads.
                    records: self.me.kind != ReplicaKind::Witness,
                });
                self.groups
                    .insert(eg, GroupSlot::Loading(vec![(from, request)]));
                return;
            }
            Some(GroupSlot::Loading(waiting)) => {
                waiting.push((from, request));
                return;
            }
            Some(GroupSlot::Failed(e)) => {
                let error = ReplicaError::Storage(e.clone());
                reply(
                    out,
                    from,
                    ReplicaReply::Error {
                        id: request.id(),
                        error,
                    },
                );
                return;
            }
            Some(GroupSlot::Ready(group)) => group,
        };
        if let ReplicaRequest::AwaitVisible { id, past, wait, .. } = &request
            && group.rejoin() != Rejoin::Uncleared
            && group.visible() <= *past
        {
            let awaiter = Awaiter {
                from,
                id: *id,
                past: *past,
                until: self.now + (*wait).min(AWAIT_MAX),
            };
            // Held until its group moves or its wait ends; with too many held already,
            // answered at once like `LogState`.
            if self.awaiting.hold(eg.clone(), awaiter).is_ok() {
                return;
            }
        }
        let (me, kind, bugs) = (self.me.id, self.me.kind, self.config.bugs);
        let placement = self.placement.as_ref();
        let voter = kind != ReplicaKind::ReadOnly;
        let answer = match request {
            ReplicaRequest::Prepare { id, .. } | ReplicaRequest::Accept { id, .. } if !voter => {
                ReplicaReply::Error {
                    id,
                    error: ReplicaError::NotVoter,
                }
            }
            ReplicaRequest::Prepare { id, voters_at, .. }
            | ReplicaRequest::Accept { id, voters_at, .. }
                if let Some((range, epoch)) = stale_voters(placement, &eg, voters_at) =>
            {
                ReplicaReply::Error {
                    id,
                    error: ReplicaError::WrongServer { range, epoch },
                }
            }
            ReplicaRequest::Prepare { id, position, .. }
            | ReplicaRequest::Accept { id, position, .. }
                if !group.votes_at(position) =>
            {
                ReplicaReply::Error {
                    id,
                    error: ReplicaError::Rejoining,
                }
            }
            ReplicaRequest::Prepare {
                id,
                position,
                ballot,
                ..
            } => {
                let result = group.prepare(position, ballot, out);
                ReplicaReply::Prepare { id, result }
            }
            ReplicaRequest::Accept {
                id,
                position,
                ballot,
                entry,
                grant,
                previous_visible,
                ..
            } => match entry.check_proposed_for(&eg) {
                Err(e) => ReplicaReply::Error {
                    id,
                    error: ReplicaError::BadEntry(e.to_string()),
                },
                Ok(()) => ReplicaReply::Accept {
                    id,
                    result: {
                        if grant && let Some(previous) = previous_visible {
                            group.mark_previous_visible(kind, &bugs, position, previous, out);
                        }
                        group.accept(
                            me,
                            &bugs,
                            Proposal {
                                position,
                                ballot,
                                entry,
                                grant,
                            },
                            out,
                        )
                    },
                },
            },
            ReplicaRequest::MarkVisible {
                id,
                position,
                ballot,
                entry,
                ..
            } => match entry.check_for(&eg) {
                Err(e) => ReplicaReply::Error {
                    id,
                    error: ReplicaError::BadEntry(e.to_string()),
                },
                Ok(()) => match group.mark_visible(kind, &bugs, position, ballot, entry, out) {
                    Ok(()) => ReplicaReply::MarkedVisible {
                        id,
                        applied: group.applied(),
                    },
                    Err(p) => ReplicaReply::Error {
                        id,
                        error: ReplicaError::Conflict(p),
                    },
                },
            },
            ReplicaRequest::LogState { id, .. } | ReplicaRequest::AwaitVisible { id, .. }
                if group.rejoin() == Rejoin::Uncleared =>
            {
                ReplicaReply::Error {
                    id,
                    error: ReplicaError::Rejoining,
                }
            }
            ReplicaRequest::LogState { id, .. } | ReplicaRequest::AwaitVisible { id, .. } => {
                ReplicaReply::LogState {
                    id,
                    state: group.log_state(),
                }
            }
            ReplicaRequest::Snapshot { id, .. } => {
                let at = group.applied();
                match group.slot(at).filter(|s| s.visible) {
                    Some(slot) if kind != ReplicaKind::Witness && at > Position::NONE => {
                        out.push(Output::ReadSnapshot {
                            to: from,
                            id,
                            eg,
                            at,
                            slot: slot.clone(),
                        });
                        return;
                    }
                    _ => ReplicaReply::Error {
                        id,
                        error: ReplicaError::NoSnapshot,
                    },
                }
            }
            ReplicaRequest::ReadLog { id, position, .. } => {
                if position <= group.truncated() {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::Truncated {
                            truncated: group.truncated(),
                            chosen: group.chosen_at(position),
                        },
                    }
                } else {
                    ReplicaReply::Log {
                        id,
                        slot: group.slot(position).cloned(),
                    }
                }
            }
            ReplicaRequest::Read { id, at, query, .. } => {
                if kind == ReplicaKind::Witness {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::NotServing,
                    }
                } else if let Err(e) = check_query(&eg, &query) {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::BadQuery(e),
                    }
                } else {
                    let mut next_leader = None;
                    let at = match at {
                        ReadAt::Settled if group.rejoin() == Rejoin::Uncleared => {
                            let error = ReplicaError::Rejoining;
                            reply(out, from, ReplicaReply::Error { id, error });
                            return;
                        }
                        ReadAt::Settled => {
                            let state = group.log_state();
                            let in_flight = state.highest > state.visible
                                && !bugs.settled_read_ignores_in_flight();
                            if in_flight || state.applied < state.visible {
                                // In flight here, or not applied yet: the reader
                                // catches up from this state.
                                reply(out, from, ReplicaReply::LogState { id, state });
                                return;
                            }
                            next_leader = state.next_leader;
                            Some(state.visible)
                        }
                        ReadAt::Position(p) if p > group.applied() => {
                            let error = ReplicaError::NotApplied {
                                applied: group.applied(),
                            };
                            reply(out, from, ReplicaReply::Error { id, error });
                            return;
                        }
                        ReadAt::Position(p) if p < group.history_from() => {
                            let error = ReplicaError::HistoryFrom {
                                installed: group.history_from(),
                            };
                            reply(out, from, ReplicaReply::Error { id, error });
                            return;
                        }
                        ReadAt::Position(p) => Some(p),
                        ReadAt::Applied => {
                            // The leader the entry there names, if it is the visible
                            // one (a blind write's basis: "Relayed commits").
                            let state = group.log_state();
                            if state.applied == state.visible {
                                next_leader = state.next_leader;
                            }
                            Some(group.applied())
                        }
                        ReadAt::Latest => None,
                    };
                    // With a read at a position, the locks prepared there, if any may be
                    // (none for a latest read, which no transaction builds on).
                    let locks = at.is_some_and(|p| group.may_hold_locks_at(p));
                    out.push(Output::ReadData {
                        to: from,
                        id,
                        eg: Some(eg),
                        at,
                        query,
                        next_leader,
                        locks,
                    });
                    return;
                }
            }
            ReplicaRequest::ScanGlobal { .. } | ReplicaRequest::ListGroups { .. } => {
                unreachable!("a global scan or a listing is answered before any group is looked up")
            }
        };
        reply(out, from, answer);
    }
}

fn reply(out: &mut Vec<Output>, to: NodeId, reply: ReplicaReply) {
    out.push(Output::Send {
        to,
        message: Message::ReplicaReply(reply),
    });
}

fn check_query(eg: &EgId, query: &DataQuery) -> Result<(), String> {
    let data = data_range(eg);
    match query {
        DataQuery::Rows(rows) => match rows.iter().find(|r| !data.contains(r)) {
            Some(r) => Err(format!(
                "row {} is not a data row of {eg}",
                r.escape_ascii()
            )),
            None => Ok(()),
        },
        DataQuery::Scan { range, .. } => {
            let inside = data.contains(&range.start) || range.is_empty();
            let end_inside = match (&range.end, &data.end) {
                (Some(end), Some(data_end)) => end <= data_end,
                (None, None) => true,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if inside && end_inside {
                Ok(())
            } else {
                Err(format!("scan leaves the data rows of {eg}"))
            }
        }
    }
}

/// A vote asked by a proposer counting an older voter set than the range's, refused
/// (*votes-by-the-current-voters*, `ServerPlacement::stale_voters`): the range and
/// its epoch, for the `WrongServer` answer. Never for a replica that is not placed.
fn stale_voters(
    placement: Option<&ServerPlacement>,
    eg: &EgId,
    voters_at: Version,
) -> Option<(RangeId, Version)> {
    placement?.stale_voters(&eg.0, voters_at)
}

/// Answers a [`Output::ReadSnapshot`]: the group's data rows as of `at`.
pub fn answer_snapshot<S: RowRead>(
    store: &S,
    id: u64,
    eg: &EgId,
    at: Position,
    slot: SlotRecord,
) -> ReplicaReply {
    match store.scan(&data_range(eg), at.0, &ScanOptions::default()) {
        Ok(rows) => ReplicaReply::Snapshot { id, at, slot, rows },
        Err(e) => ReplicaReply::Error {
            id,
            error: ReplicaError::Storage(e.to_string()),
        },
    }
}

/// The prepared records of `eg` whose locks column is live at `ts` (that column only).
pub(crate) fn prepared_records<S: RowRead>(
    store: &S,
    eg: &EgId,
    ts: megastore_rowstore::Timestamp,
) -> Result<Vec<Row>, megastore_rowstore::RowStoreError> {
    store.scan(
        &crate::two_phase::records_range(eg),
        ts,
        &ScanOptions {
            columns: crate::two_phase::locks_column(),
            ..ScanOptions::default()
        },
    )
}

/// Answers a [`Output::ReadData`]: reads the store at the position's timestamp and
/// builds the reply, with the group's prepared locks there if `locks`. Drivers call
/// this; it is here so what a read returns is decided once.
pub fn answer_read<S: RowRead>(
    store: &S,
    id: u64,
    eg: Option<&EgId>,
    at: Option<Position>,
    query: &DataQuery,
    next_leader: Option<ReplicaId>,
    locks: bool,
) -> ReplicaReply {
    let ts = at.map_or(megastore_rowstore::LATEST, |p| p.0);
    let result = match query {
        DataQuery::Rows(rows) => rows
            .iter()
            .filter_map(|row| store.read_row(row, &KeyRange::all(), ts).transpose())
            .collect::<Result<Vec<Row>, _>>(),
        DataQuery::Scan {
            range,
            limit,
            reverse,
        } => store.scan(
            range,
            ts,
            &ScanOptions {
                limit: *limit,
                reverse: *reverse,
                ..ScanOptions::default()
            },
        ),
    };
    let records = |eg: &EgId| prepared_records(store, eg, ts);
    let pending = match (eg, at) {
        (Some(eg), Some(_)) if locks => records(eg),
        (Some(eg), Some(at)) if cfg!(debug_assertions) => {
            // *locks-known*: where the replica says no record lives, none does.
            let found = records(eg).map_or(0, |rows| rows.len());
            assert!(
                found == 0,
                "locks-known: {eg} holds {found} records at {at:?}"
            );
            Ok(Vec::new())
        }
        _ => Ok(Vec::new()),
    };
    match (result, pending) {
        (Ok(rows), Ok(pending)) => ReplicaReply::Data {
            id,
            at,
            rows,
            pending,
            next_leader,
        },
        (Err(e), _) | (_, Err(e)) => ReplicaReply::Error {
            id,
            error: ReplicaError::Storage(e.to_string()),
        },
    }
}
