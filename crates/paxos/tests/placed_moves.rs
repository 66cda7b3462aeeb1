//! Moves under arbitrary interleavings, over real replica cores: the property of
//! `crates/placement/tests/moves.rs`, with each server a placed [`Replica`] over its own
//! store instead of a set of numbers. Operators move slots with the placement core's
//! `next_step` — the copies are `copy_range` between the servers' stores, taken by a
//! target only for a move its placement shows; the freeze is `ReplicaInput::Freeze` —
//! while writers accept and mark positions of a few groups at whichever server serves
//! the slot, servers read placements late and in any order, and restart from their
//! stores; each server's coordinator reads placements on its own, and the operator
//! fences the source's before recording a move frozen. After every step:
//! - *one-server-per-slot*: no group's slot is served by two servers;
//! - *moves-keep-writes*: the server the stored placement names for a slot holds, in
//!   its store, every position acknowledged for that slot (and a full replica the
//!   last one's data);
//! - *invalidate-where-served*: at most one coordinator acknowledges invalidations for
//!   a group's slot, and none at a move's source once the move is recorded frozen.
//!
//! The replica core asserts *loaded-only-if-served* after every step. With a knob on,
//! the search must find a violation.

mod support;

use std::collections::BTreeMap;

use std::time::Duration;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, CoordinatorReply, CoordinatorRequest,
    Input as CoordinatorInput, Output as CoordinatorOutput,
};
use megastore_paxos::cells::StoredGroup;
use megastore_paxos::entry::root_row;
use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    LogEntry, ProtocolBugs, ReplicaInput, ReplicaReply, ReplicaRequest, RowWrite, copy_range,
    load_server_placement,
};
use megastore_placement::{
    MovePhase, MoveRequest, OperatorBugs, OperatorStep, Placement, PlacementBugs, Progress, Server,
    ServerId, ServerPlacement, Serving, next_step,
};
use megastore_rowstore::{Durability, KeyRange, LATEST, MemoryStore, RowRead};
use megastore_types::{ClientId, EgId, LockNodeId, NodeId, Position, ReplicaId, SiteId, Time};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use support::{Node, ballot, topology, write};

#[derive(Debug, Clone)]
enum Step {
    /// A server's replica, or its coordinator (a process of its own), reads a placement
    /// newer than its own: the newest, or one in between.
    Read {
        server: usize,
        coordinator: bool,
        newest: bool,
        pick: usize,
    },
    /// An operator takes its next step (or, idle, is asked to move slot `slot` of the
    /// range at `range` to the site's server at `to`).
    Operate {
        operator: usize,
        range: usize,
        slot: usize,
        to: usize,
    },
    /// An operator crashes and starts again on the same move, remembering nothing.
    CrashOperator { operator: usize },
    /// An operator gives its move up.
    GiveUp { operator: usize },
    /// A writer commits the next position of a group's slot, at the server serving it.
    Write { group: usize, slot: usize },
    /// A server crashes (unsynced writes lost) and restarts from its store.
    Restart { server: usize },
    /// An operator splits the range at `range` at a key.
    Split { range: usize, at: u8 },
}

fn step(slots: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<usize>(), any::<bool>(), any::<bool>(), any::<usize>())
            .prop_map(|(server, coordinator, newest, pick)| Step::Read { server, coordinator, newest, pick }),
        6 => (0..OPERATORS, any::<usize>(), 0..slots, any::<usize>())
            .prop_map(|(operator, range, slot, to)| Step::Operate { operator, range, slot, to }),
        1 => (0..OPERATORS).prop_map(|operator| Step::CrashOperator { operator }),
        1 => (0..OPERATORS).prop_map(|operator| Step::GiveUp { operator }),
        4 => (0..GROUPS.len(), 0..slots).prop_map(|(group, slot)| Step::Write { group, slot }),
        1 => any::<usize>().prop_map(|server| Step::Restart { server }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(range, at)| Step::Split { range, at }),
    ]
}

const OPERATORS: usize = 2;

/// The groups written: two in each of the two initial ranges.
const GROUPS: [&[u8]; 4] = [b"\x10a", b"\x50b", b"\x90c", b"\xd0d"];

/// The voters written (a read-only replica takes no accepts).
const SLOTS: [ReplicaId; 3] = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];

/// Two servers at each of the voters' sites (the slot's replica id is the site's), one
/// at the read-only replica's.
fn servers() -> Vec<Server> {
    [(0, 1), (1, 1), (10, 2), (11, 2), (20, 3), (21, 3), (30, 4)]
        .into_iter()
        .map(|(id, site)| Server {
            id: ServerId(id),
            site: SiteId(site),
        })
        .collect()
}

fn group(index: usize) -> EgId {
    EgId(GROUPS[index].to_vec())
}

fn keys(span: megastore_placement::Span) -> KeyRange {
    KeyRange {
        start: span.start,
        end: span.end,
    }
}

/// One server: the replica core of its site's slot, over its store.
struct ServerNode {
    id: ServerId,
    node: Node,
    /// The coordinator beside its replica (no lock session: it answers invalidations
    /// in every phase, which is what is checked of it).
    coordinator: Coordinator,
}

impl ServerNode {
    fn placement(&self) -> &ServerPlacement {
        self.node.replica.placement().expect("placed")
    }

    fn observe(&mut self, placement: Placement) {
        self.node
            .step_at(Time::ZERO, ReplicaInput::Placement(placement));
    }

    fn serves(&self, eg: &EgId, slot: ReplicaId) -> bool {
        self.node.id == slot
            && matches!(
                self.placement().judge(&eg.0, slot, None),
                Serving::Serve { .. }
            )
    }
}

struct World {
    history: Vec<Placement>,
    servers: Vec<ServerNode>,
    operators: Vec<Option<(MoveRequest, Progress)>>,
    /// Per (group, slot): the positions acknowledged, each with the value written.
    acknowledged: BTreeMap<(EgId, ReplicaId), Vec<String>>,
    bugs: Knobs,
}

#[derive(Debug, Clone, Copy, Default)]
struct Knobs {
    placement: PlacementBugs,
    operator: OperatorBugs,
    protocol: ProtocolBugs,
}

/// Server `id` starting: its replica from the placement it stored (or `view`, the
/// first), its coordinator from `newest`, what its host reads before answering.
fn start_server(
    id: ServerId,
    site: SiteId,
    (view, newest): (Placement, Placement),
    store: MemoryStore,
    bugs: Knobs,
) -> ServerNode {
    // From the placement it stored; one that never stored any never judged by any but
    // the first.
    let placement = load_server_placement(&store, id, bugs.placement)
        .expect("the stored placement decodes")
        .unwrap_or_else(|| ServerPlacement::new(id, view, BTreeMap::new(), bugs.placement).0);
    let coordinator = Coordinator::new(coordinator_config(ReplicaId(site.0))).placed(id, newest);
    ServerNode {
        id,
        node: Node::placed_over(site.0, placement, store, bugs.protocol),
        coordinator,
    }
}

impl World {
    fn new(bugs: Knobs) -> Self {
        let initial = Placement::initial(servers(), &topology(), 2).expect("a placement");
        Self {
            history: vec![initial.clone()],
            servers: servers()
                .into_iter()
                .map(|s| {
                    let views = (initial.clone(), initial.clone());
                    start_server(s.id, s.site, views, MemoryStore::new(), bugs)
                })
                .collect(),
            operators: vec![None; OPERATORS],
            acknowledged: BTreeMap::new(),
            bugs,
        }
    }

    fn stored(&self) -> &Placement {
        self.history.last().expect("a placement")
    }

    fn server(&mut self, id: ServerId) -> &mut ServerNode {
        self.servers
            .iter_mut()
            .find(|s| s.id == id)
            .expect("a server")
    }

    /// One step of operator `index`; false once it is idle.
    fn operate(&mut self, index: usize) -> bool {
        let Some((request, mut progress)) = self.operators[index].clone() else {
            return false;
        };
        let stored = self.stored().clone();
        match next_step(&stored, &request, &mut progress, self.bugs.operator) {
            OperatorStep::Write { expected, next } => {
                if expected == stored.version() {
                    self.history.push(next);
                }
            }
            OperatorStep::Copy {
                from,
                to,
                range,
                move_id,
                last,
                ..
            } => {
                // The final copy is taken only from a source frozen for the move.
                if last
                    && let Err(why) = self
                        .server(from)
                        .node
                        .replica
                        .final_copy_source(range, move_id)
                {
                    progress.final_copy_refused(why);
                    self.operators[index] = Some((request, progress));
                    return true;
                }
                let target = self.server(to);
                if target.placement().receive(range, move_id).is_err() {
                    target.observe(stored.clone());
                }
                let Ok(span) = target.placement().receive(range, move_id) else {
                    self.operators[index] = Some((request, progress));
                    return true;
                };
                let store_of = |id| &self.servers[index_of(&self.servers, id)].node.store;
                copy_range(
                    store_of(from),
                    store_of(to),
                    &keys(span),
                    2,
                    Durability::Synced,
                )
                .expect("the memory store does not fail");
                progress.copied(last);
            }
            OperatorStep::Freeze {
                server,
                range,
                move_id,
            } => {
                let source = self.server(server);
                source.observe(stored.clone());
                source
                    .node
                    .step_at(Time::ZERO, ReplicaInput::Freeze { range, move_id });
                if source.placement().frozen_for(range, move_id) {
                    progress.froze = true;
                }
            }
            // No coordinators here: each has read the placement by the time it is asked.
            OperatorStep::Fence { server, move_id } => {
                // Its host has it read the placement, then asks.
                let coordinator = &mut self.server(server).coordinator;
                coordinator.step(Time::ZERO, CoordinatorInput::Placement(stored.clone()));
                if coordinator.knows_placement(move_id) {
                    progress.fenced = true;
                }
            }
            OperatorStep::Done(_) => {
                self.operators[index] = None;
                return false;
            }
        }
        self.operators[index] = Some((request, progress));
        true
    }

    fn apply(&mut self, step: &Step) {
        let stored = self.stored().clone();
        let range_at = |pick: usize| stored.ranges()[pick % stored.ranges().len()].clone();
        match step {
            Step::Read {
                server,
                coordinator,
                newest,
                pick,
            } => {
                let count = self.servers.len();
                let node = &mut self.servers[server % count];
                let from = if *coordinator {
                    node.coordinator.placement().expect("placed").version()
                } else {
                    node.placement().view().version()
                };
                let newer = self.history[(from.0 as usize).min(self.history.len())..].to_vec();
                if !newer.is_empty() {
                    let chosen = if *newest {
                        newer.len() - 1
                    } else {
                        pick % newer.len()
                    };
                    let placement = newer[chosen].clone();
                    if *coordinator {
                        node.coordinator
                            .step(Time::ZERO, CoordinatorInput::Placement(placement));
                    } else {
                        node.observe(placement);
                    }
                }
            }
            Step::Operate {
                operator,
                range,
                slot,
                to,
            } => {
                if self.operators[*operator].is_none() {
                    let range = range_at(*range);
                    let slot = SLOTS[*slot];
                    let site = topology().replica(slot).expect("a slot").site;
                    let at_site: Vec<ServerId> = servers()
                        .into_iter()
                        .filter(|s| s.site == site)
                        .map(|s| s.id)
                        .collect();
                    let request = MoveRequest {
                        range: range.id,
                        replica: slot,
                        to: at_site[to % at_site.len()],
                    };
                    self.operators[*operator] = Some((request, Progress::default()));
                }
                self.operate(*operator);
            }
            Step::CrashOperator { operator } => {
                if let Some((_, progress)) = &mut self.operators[*operator] {
                    *progress = Progress::default();
                }
            }
            Step::GiveUp { operator } => {
                if let Some((_, progress)) = &mut self.operators[*operator] {
                    progress.giving_up = true;
                }
            }
            Step::Write { group: g, slot } => {
                let (eg, slot) = (group(*g), SLOTS[*slot]);
                let acked = self.acknowledged.entry((eg.clone(), slot)).or_default();
                let position = acked.len() as u64 + 1;
                let value = format!("{}-{}-{position}", String::from_utf8_lossy(&eg.0), slot.0);
                let Some(server) = self.servers.iter_mut().find(|s| s.serves(&eg, slot)) else {
                    return;
                };
                if commit(&mut server.node, &eg, position, &value) {
                    acked.push(value);
                }
            }
            Step::Restart { server } => {
                let count = self.servers.len();
                let old = &mut self.servers[server % count];
                old.node.store.crash();
                let (id, site) = (old.id, SiteId(old.node.id.0));
                let store = std::mem::replace(&mut old.node.store, MemoryStore::new());
                let views = (self.history[0].clone(), stored.clone());
                *old = start_server(id, site, views, store, self.bugs);
            }
            Step::Split { range, at } => {
                if let Ok(next) = stored.split(range_at(*range).id, &[*at]) {
                    self.history.push(next);
                }
            }
        }
    }

    fn check(&mut self, after: &str) -> Result<(), TestCaseError> {
        let stored = self.stored().clone();
        for index in 0..GROUPS.len() {
            let eg = group(index);
            for slot in SLOTS {
                let serving: Vec<ServerId> = self
                    .servers
                    .iter()
                    .filter(|s| s.serves(&eg, slot))
                    .map(|s| s.id)
                    .collect();
                prop_assert!(
                    serving.len() <= 1,
                    "*one-server-per-slot*: slot {} of {eg} served by {serving:?} after {after}",
                    slot.0
                );
                self.check_coordinators(&stored, &eg, slot, after)?;
                let acked = self
                    .acknowledged
                    .get(&(eg.clone(), slot))
                    .cloned()
                    .unwrap_or_default();
                let Some(last) = acked.last() else {
                    continue;
                };
                let holder = stored.range_of(&eg.0).slot(slot).expect("a slot").server;
                let holding = self.server(holder);
                // What its store holds.
                let row = holding
                    .node
                    .store
                    .read_row(&root_row(&eg), &KeyRange::all(), LATEST)
                    .expect("the memory store does not fail");
                let visible = StoredGroup::from_row(row.as_ref())
                    .expect("a root row decodes")
                    .visible;
                prop_assert!(
                    visible.0 >= acked.len() as u64,
                    "*moves-keep-writes*: {holder} holds slot {} of {eg} visible through {visible}, {} acknowledged, after {after}",
                    slot.0,
                    acked.len()
                );
                if topology().kind(slot) == Some(megastore_types::ReplicaKind::Full) {
                    let data = holding
                        .node
                        .store
                        .read_cell(&[&eg.0[..], b"\x01k"].concat(), b"v", LATEST)
                        .expect("the memory store does not fail")
                        .map(|cell| String::from_utf8_lossy(&cell.value).into_owned());
                    prop_assert_eq!(
                        data.as_deref(),
                        Some(last.as_str()),
                        "*moves-keep-writes*: {}'s data of {} at slot {} after {}",
                        holder,
                        eg,
                        slot.0,
                        after
                    );
                }
                // What it answers, if it serves the slot already: the same.
                if holding.serves(&eg, slot) {
                    let asked = ReplicaRequest::LogState {
                        id: 3,
                        eg: eg.clone(),
                    };
                    match holding.node.ask(asked) {
                        ReplicaReply::LogState { state, .. } => prop_assert!(
                            state.visible.0 >= acked.len() as u64,
                            "*moves-keep-writes*: {holder} answers slot {} of {eg} visible through {}, {} acknowledged, after {after}",
                            slot.0,
                            state.visible,
                            acked.len()
                        ),
                        other => prop_assert!(
                            false,
                            "{holder} serving slot {} of {eg} answers {other:?}",
                            slot.0
                        ),
                    }
                }
            }
        }
        Ok(())
    }
}

impl World {
    /// *invalidate-where-served*: at most one coordinator acknowledges invalidations
    /// for a group's slot, and none at a move's source once the move is recorded
    /// frozen (a writer counting it could miss the coordinator that will vouch).
    fn check_coordinators(
        &mut self,
        stored: &Placement,
        eg: &EgId,
        slot: ReplicaId,
        after: &str,
    ) -> Result<(), TestCaseError> {
        if topology().kind(slot) != Some(megastore_types::ReplicaKind::Full) {
            return Ok(());
        }
        let writer = NodeId::Client(ClientId(9));
        let mut acknowledging = Vec::new();
        for server in self.servers.iter_mut().filter(|s| s.node.id == slot) {
            let request = CoordinatorRequest::Invalidate {
                id: 1,
                eg: eg.clone(),
                position: Position(1),
            };
            let out = server.coordinator.step(
                Time::ZERO,
                CoordinatorInput::Request {
                    from: writer,
                    request,
                },
            );
            let acknowledged = out.iter().any(|o| {
                matches!(
                    o,
                    CoordinatorOutput::Reply {
                        reply: CoordinatorReply::Invalidated { .. },
                        ..
                    }
                )
            });
            if acknowledged {
                acknowledging.push(server.id);
            }
        }
        prop_assert!(
            acknowledging.len() <= 1,
            "*invalidate-where-served*: slot {} of {eg} acknowledged by the coordinators of {acknowledging:?} after {after}",
            slot.0
        );
        let range = stored.range_of(&eg.0);
        if let Some(m) = &range.moving
            && m.replica == slot
            && m.phase == MovePhase::Frozen
        {
            prop_assert!(
                !acknowledging.contains(&m.from),
                "*invalidate-where-served*: {}'s coordinator acknowledges slot {} of {eg}, moving away and recorded frozen, after {after}",
                m.from,
                slot.0
            );
        }
        Ok(())
    }
}

fn coordinator_config(replica: ReplicaId) -> CoordinatorConfig {
    CoordinatorConfig {
        replica,
        lock_nodes: vec![LockNodeId(0)],
        lock_attempt_timeout: Duration::from_secs(1),
        keepalive_interval: Duration::from_secs(3),
        max_clock_drift_ppm: 1_000,
        lease_margin: Duration::from_millis(100),
        retry_delay: Duration::from_secs(1),
        first_request_id: 1,
        valid_max: 1_000,
        invalid_max: 1_000,
        bugs: CoordinatorBugs::NONE,
    }
}

fn index_of(servers: &[ServerNode], id: ServerId) -> usize {
    servers.iter().position(|s| s.id == id).expect("a server")
}

/// Accepts and marks visible position `p` of `eg` (ballot 1) at `node`, writing
/// `value`; whether both were answered (so synced).
fn commit(node: &mut Node, eg: &EgId, p: u64, value: &str) -> bool {
    let mut entry: LogEntry = write(p, Some(1), value);
    entry.writes = vec![RowWrite {
        row: [&eg.0[..], b"\x01k"].concat(),
        ..entry.writes.remove(0)
    }];
    let accept = ReplicaRequest::Accept {
        id: 1,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(1),
        entry: entry.clone(),
        grant: false,
        previous_visible: None,
        voters_at: megastore_placement::Version(0),
    };
    let accepted = matches!(
        node.ask(accept),
        ReplicaReply::Accept {
            result: AcceptResult::Accepted,
            ..
        }
    );
    let mark = ReplicaRequest::MarkVisible {
        id: 2,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(1),
        entry,
    };
    accepted && matches!(node.ask(mark), ReplicaReply::MarkedVisible { .. })
}

/// Runs `steps`, checking after each, then lets every operator finish its move.
fn run(steps: &[Step], bugs: Knobs) -> Result<(), TestCaseError> {
    let mut world = World::new(bugs);
    for step in steps {
        world.apply(step);
        world.check(&format!("{step:?}"))?;
    }
    for operator in 0..OPERATORS {
        let mut steps = 0;
        while world.operate(operator) {
            world.check(&format!("operator {operator} finishing"))?;
            steps += 1;
            prop_assert!(steps < 100, "operator {operator} does not finish its move");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 1024, failure_persistence: None, ..Config::default() })]

    #[test]
    fn moves_over_replica_cores_keep_one_server_per_slot_and_every_acknowledged_write(
        steps in proptest::collection::vec(step(SLOTS.len()), 1..60)
    ) {
        run(&steps, Knobs::default())?;
    }

    #[test]
    fn moves_back_and_forth_over_replica_cores_keep_every_acknowledged_write(
        steps in proptest::collection::vec(step_at_one_site(), 1..60)
    ) {
        run(&steps, Knobs::default())?;
    }
}

/// Steps that move only the first slot, back and forth between its site's two servers,
/// with no splits or restarts: where a copy taken by a target behind the move is lost.
fn step_at_one_site() -> impl Strategy<Value = Step> {
    prop_oneof![
        // Mostly the replicas' reads: a late one is what loses a copy.
        3 => (any::<usize>(), proptest::bool::weighted(0.25), any::<bool>(), any::<usize>())
            .prop_map(|(server, coordinator, newest, pick)| Step::Read { server, coordinator, newest, pick }),
        6 => (0..OPERATORS, any::<usize>(), any::<usize>())
            .prop_map(|(operator, range, to)| Step::Operate { operator, range, slot: 0, to }),
        1 => (0..OPERATORS).prop_map(|operator| Step::CrashOperator { operator }),
        4 => (0..GROUPS.len()).prop_map(|group| Step::Write { group, slot: 0 }),
    ]
}

/// The search (moves of the first slot only, between its site's two servers) finds a
/// violation of one of `invariants` with `bugs` on.
fn search_catches(bugs: Knobs, invariants: &[&str]) {
    search_catches_within(8_192, bugs, invariants);
}

/// The seed of every knob's search: fixed, so that a knob's catch is no matter of
/// luck (crates/placement/tests/moves.rs's random-seeded search once missed its knob in
/// CI). Seeds 1 to 4 each catch all five knobs, within 3 s each in a debug build. The
/// knob-free properties still draw random cases.
const SEARCH_SEED: u64 = 1;

/// [`search_catches`], trying up to `cases` cases.
fn search_catches_within(cases: u32, bugs: Knobs, invariants: &[&str]) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(SEARCH_SEED),
        ..Config::default()
    });
    let found = runner.run(
        &proptest::collection::vec(step_at_one_site(), 1..60),
        |steps| run(&steps, bugs),
    );
    match found {
        Err(proptest::test_runner::TestError::Fail(why, _)) => {
            let why = why.to_string();
            assert!(invariants.iter().any(|i| why.contains(i)), "{why}");
        }
        other => panic!("{bugs:?} went unnoticed: {other:?}"),
    }
}

#[test]
fn the_search_catches_a_source_serving_while_frozen() {
    let bugs = Knobs {
        placement: PlacementBugs {
            serve_while_frozen: true,
            ..PlacementBugs::NONE
        },
        ..Knobs::default()
    };
    search_catches(bugs, &["*one-server-per-slot*", "*moves-keep-writes*"]);
}

#[test]
fn the_search_catches_a_move_finished_without_its_final_copy() {
    let bugs = Knobs {
        operator: OperatorBugs {
            finish_without_final_copy: true,
            ..OperatorBugs::NONE
        },
        ..Knobs::default()
    };
    search_catches(bugs, &["*moves-keep-writes*"]);
}

#[test]
fn the_search_catches_a_target_taking_a_copy_before_it_sees_the_move() {
    let bugs = Knobs {
        placement: PlacementBugs {
            receive_before_seeing_move: true,
            ..PlacementBugs::NONE
        },
        ..Knobs::default()
    };
    // Rarer here than in the placement model (about one case in 3,000): the
    // target's replica must miss every placement through the second move's copies.
    search_catches_within(32_768, bugs, &["*moves-keep-writes*"]);
}

#[test]
fn the_search_catches_a_replica_keeping_groups_it_stopped_serving() {
    let bugs = Knobs {
        protocol: ProtocolBugs {
            keep_unserved_groups: true,
            ..ProtocolBugs::NONE
        },
        ..Knobs::default()
    };
    search_catches(bugs, &["*moves-keep-writes*"]);
}

/// A move by hand: a write, the whole move of its slot to the other server of its
/// site, and a write there; the world is not vacuous.
#[test]
fn a_move_over_replica_cores_hands_the_slot_over_with_every_write() {
    let mut world = World::new(Knobs::default());
    let eg = group(0);
    let holder = |world: &World| {
        world
            .stored()
            .range_of(&eg.0)
            .slot(ReplicaId(1))
            .expect("a slot")
            .server
    };
    let before = holder(&world);
    // Site 1's servers are 0 and 1: `to` picks the other.
    let to = usize::from(before == ServerId(0));
    let write = Step::Write { group: 0, slot: 0 };
    let operate = Step::Operate {
        operator: 0,
        range: 0,
        slot: 0,
        to,
    };
    let mut steps = vec![write.clone()];
    steps.extend(std::iter::repeat_n(operate, 7)); // begin, copy, freeze, fence, record, copy, finish
    steps.extend([
        Step::Read {
            server: to,
            coordinator: false,
            newest: true,
            pick: 0,
        },
        write,
    ]);
    for step in &steps {
        world.apply(step);
        world.check(&format!("{step:?}")).unwrap();
    }
    assert_ne!(holder(&world), before, "the slot moved");
    assert_eq!(world.acknowledged[&(eg, ReplicaId(1))].len(), 2);
}

#[test]
fn the_search_catches_a_move_recorded_frozen_without_fencing_the_sources_coordinator() {
    let bugs = Knobs {
        operator: OperatorBugs {
            record_frozen_unfenced: true,
            ..OperatorBugs::NONE
        },
        ..Knobs::default()
    };
    search_catches(bugs, &["*invalidate-where-served*"]);
}
