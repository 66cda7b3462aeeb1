//! Moves under arbitrary interleavings. Operators (which crash and resume, or give up)
//! move slots with the placement core's `next_step`, while an operator splits ranges,
//! clients write to whichever server serves a key, and every server reads placements
//! late, in its own order, and restarts. After every step:
//! - *one-server-per-slot*: no group's slot is served by two servers;
//! - *moves-keep-writes*: the server that holds a slot (as stored) has every write
//!   acknowledged to that slot.
//!
//! At the end, operators left to run finish or abort every move. The same search with
//! a bug knob on must find a violation, or it proves nothing; a second search moves one
//! slot back and forth between the two servers of its site, where a copy taken by a
//! target behind the move is lost.

use std::collections::{BTreeMap, BTreeSet};

use megastore_placement::{
    MoveRequest, OperatorBugs, OperatorStep, Placement, PlacementBugs, Progress, Server, ServerId,
    ServerPlacement, Serving, Span, next_step,
};
use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

#[derive(Debug, Clone)]
enum Step {
    /// A server reads a placement newer than its own: the newest, or one in between.
    Read {
        server: usize,
        newest: bool,
        pick: usize,
    },
    Split {
        range: usize,
        at: Vec<u8>,
    },
    /// An operator takes its next step (or, idle, is asked for a new move: to any
    /// server, or to one of the slot's site, its holder among them).
    Operate {
        operator: usize,
        range: usize,
        slot: usize,
        to: usize,
        same_site: bool,
    },
    /// An operator crashes and starts again on the same move, remembering nothing.
    CrashOperator {
        operator: usize,
    },
    /// An operator gives its move up.
    GiveUp {
        operator: usize,
    },
    /// A client writes to a key's slot, at the server that serves it (if one does).
    Write {
        key: usize,
        slot: usize,
    },
    /// A server restarts with what it persisted (its freezes) and its placement.
    Restart {
        server: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<usize>(), any::<bool>(), any::<usize>())
            .prop_map(|(server, newest, pick)| Step::Read { server, newest, pick }),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..3))
            .prop_map(|(range, at)| Step::Split { range, at }),
        // Mostly to a server of the slot's site, so that most requests are moves
        // (moves back and forth among them included); some to any server, refused.
        6 => (0..OPERATORS, any::<usize>(), any::<usize>(), any::<usize>(), proptest::bool::weighted(0.875))
            .prop_map(|(operator, range, slot, to, same_site)| Step::Operate { operator, range, slot, to, same_site }),
        1 => (0..OPERATORS).prop_map(|operator| Step::CrashOperator { operator }),
        1 => (0..OPERATORS).prop_map(|operator| Step::GiveUp { operator }),
        4 => (any::<usize>(), any::<usize>()).prop_map(|(key, slot)| Step::Write { key, slot }),
        1 => any::<usize>().prop_map(|server| Step::Restart { server }),
    ]
}

const OPERATORS: usize = 2;

fn topology() -> Topology {
    let info = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    Topology::new(vec![
        info(1, ReplicaKind::Full, 0),
        info(2, ReplicaKind::Full, 1),
        info(3, ReplicaKind::Witness, 2),
    ])
    .unwrap()
}

/// Three servers at site 0, two at site 1, one at site 2.
fn servers() -> Vec<Server> {
    [(0, 0), (1, 0), (2, 0), (10, 1), (11, 1), (20, 2)]
        .into_iter()
        .map(|(id, site)| Server {
            id: ServerId(id),
            site: SiteId(site),
        })
        .collect()
}

/// Keys probed and written: both sides of every default split point, and more.
fn probes() -> Vec<Vec<u8>> {
    (0..=255u8)
        .step_by(15)
        .flat_map(|b| [vec![b], vec![b, 0x80]])
        .collect()
}

fn in_span(key: &[u8], span: &Span) -> bool {
    key >= span.start.as_slice() && span.end.as_ref().is_none_or(|end| key < end.as_slice())
}

/// One server: its placement, and the writes it holds per (key, slot).
struct Node {
    placement: ServerPlacement,
    rows: BTreeMap<(Vec<u8>, ReplicaId), BTreeSet<u64>>,
}

impl Node {
    fn observe(&mut self, placement: Placement) {
        let seen = self.placement.observe(placement);
        for span in seen.retire {
            self.rows.retain(|(key, _), _| !in_span(key, &span));
        }
    }
}

struct World {
    history: Vec<Placement>,
    nodes: Vec<Node>,
    operators: Vec<Option<(MoveRequest, Progress)>>,
    acknowledged: BTreeMap<(Vec<u8>, ReplicaId), BTreeSet<u64>>,
    next_write: u64,
    bugs: (PlacementBugs, OperatorBugs),
}

impl World {
    fn new(bugs: (PlacementBugs, OperatorBugs)) -> Self {
        let initial = Placement::initial(servers(), &topology(), 2).unwrap();
        Self {
            history: vec![initial.clone()],
            nodes: servers()
                .iter()
                .map(|s| Node {
                    placement: ServerPlacement::new(s.id, initial.clone(), BTreeMap::new(), bugs.0)
                        .0,
                    rows: BTreeMap::new(),
                })
                .collect(),
            operators: vec![None; OPERATORS],
            acknowledged: BTreeMap::new(),
            next_write: 0,
            bugs,
        }
    }

    fn stored(&self) -> &Placement {
        self.history.last().unwrap()
    }

    fn node(&mut self, id: ServerId) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.placement.server() == id)
            .unwrap()
    }

    /// One step of operator `index`; false once it is idle.
    fn operate(&mut self, index: usize) -> bool {
        let Some((request, mut progress)) = self.operators[index].clone() else {
            return false;
        };
        let stored = self.stored().clone();
        match next_step(&stored, &request, &mut progress, self.bugs.1) {
            OperatorStep::Write { expected, next } => {
                // Compare-and-set: only on the version read.
                if expected == stored.version() {
                    self.history.push(next);
                }
            }
            OperatorStep::Copy {
                from,
                to,
                range,
                move_id,
                span: _,
                last,
            } => {
                // The target takes the copy only for a move its placement shows; if it
                // does not, it reads the placement and is asked again.
                let target = self.node(to);
                if target.placement.receive(range, move_id).is_err() {
                    target.observe(stored.clone());
                }
                // The span is the target's: the same as the operator's, since a moving
                // range is not split.
                let Ok(span) = target.placement.receive(range, move_id) else {
                    self.operators[index] = Some((request, progress));
                    return true;
                };
                let copied: Vec<_> = self
                    .node(from)
                    .rows
                    .iter()
                    .filter(|((key, _), _)| in_span(key, &span))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let target = self.node(to);
                target.rows.retain(|(key, _), _| !in_span(key, &span));
                target.rows.extend(copied);
                progress.copied(last);
            }
            OperatorStep::Freeze {
                server,
                range,
                move_id,
            } => {
                let source = self.node(server);
                source.observe(stored.clone());
                if source.placement.freeze(range, move_id).is_ok() {
                    progress.froze = true;
                }
            }
            // No coordinators here: each has read the placement by the time it is asked.
            OperatorStep::Fence { .. } => progress.fenced = true,
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
                newest,
                pick,
            } => {
                let count = self.nodes.len();
                let from = self.nodes[server % count].placement.view().version().0 as usize;
                let newer = self.history[from.min(self.history.len())..].to_vec();
                if !newer.is_empty() {
                    let chosen = if *newest {
                        newer.len() - 1
                    } else {
                        pick % newer.len()
                    };
                    self.nodes[server % count].observe(newer[chosen].clone());
                }
            }
            Step::Split { range, at } => {
                if let Ok(next) = stored.split(range_at(*range).id, at) {
                    self.history.push(next);
                }
            }
            Step::Operate {
                operator,
                range,
                slot,
                to,
                same_site,
            } => {
                if self.operators[*operator].is_none() {
                    let range = range_at(*range);
                    let slot = &range.slots[slot % range.slots.len()];
                    let candidates: Vec<ServerId> = servers()
                        .into_iter()
                        .filter(|s| !same_site || s.site == slot.site)
                        .map(|s| s.id)
                        .collect();
                    let request = MoveRequest {
                        range: range.id,
                        replica: slot.replica,
                        to: candidates[to % candidates.len()],
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
            Step::Write { key, slot } => {
                let probes = probes();
                let key = probes[key % probes.len()].clone();
                let replica = topology().replicas()[slot % 3].id;
                let write = self.next_write;
                self.next_write += 1;
                let serving = self.nodes.iter_mut().find(|n| {
                    matches!(
                        n.placement.judge(&key, replica, None),
                        Serving::Serve { .. }
                    )
                });
                if let Some(node) = serving {
                    node.rows
                        .entry((key.clone(), replica))
                        .or_default()
                        .insert(write);
                    self.acknowledged
                        .entry((key, replica))
                        .or_default()
                        .insert(write);
                }
            }
            Step::Restart { server } => {
                let count = self.nodes.len();
                let node = &mut self.nodes[server % count];
                let old = &node.placement;
                node.placement = ServerPlacement::new(
                    old.server(),
                    old.view().clone(),
                    old.frozen().clone(),
                    self.bugs.0,
                )
                .0;
            }
        }
    }

    fn check(&self, after: &str) -> Result<(), TestCaseError> {
        let stored = self.stored();
        for key in probes() {
            for replica in topology().replicas() {
                let serving: Vec<ServerId> = self
                    .nodes
                    .iter()
                    .filter(|n| {
                        matches!(
                            n.placement.judge(&key, replica.id, None),
                            Serving::Serve { .. }
                        )
                    })
                    .map(|n| n.placement.server())
                    .collect();
                prop_assert!(
                    serving.len() <= 1,
                    "*one-server-per-slot*: replica {} of key {key:?} served by {serving:?} after {after}",
                    replica.id.0
                );
                let holder = stored.range_of(&key).slot(replica.id).unwrap().server;
                let acked = self.acknowledged.get(&(key.clone(), replica.id));
                let held = self
                    .nodes
                    .iter()
                    .find(|n| n.placement.server() == holder)
                    .and_then(|n| n.rows.get(&(key.clone(), replica.id)));
                let lost: Vec<_> = acked
                    .into_iter()
                    .flatten()
                    .filter(|w| !held.is_some_and(|h| h.contains(w)))
                    .collect();
                prop_assert!(
                    lost.is_empty(),
                    "*moves-keep-writes*: {holder} holds replica {} of key {key:?} without writes {lost:?} after {after}",
                    replica.id.0
                );
            }
        }
        Ok(())
    }
}

/// Runs `steps`, checking after each, then lets every operator finish its move.
fn run(steps: &[Step], bugs: (PlacementBugs, OperatorBugs)) -> Result<(), TestCaseError> {
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
    // A move left under way by a request that was refused (another's move of the same
    // range) has no operator; every move begun by one is over.
    Ok(())
}

const NO_BUGS: (PlacementBugs, OperatorBugs) = (
    PlacementBugs {
        serve_while_frozen: false,
        receive_before_seeing_move: false,
        serve_removed_slot: false,
        count_stale_voters: false,
    },
    OperatorBugs {
        finish_without_final_copy: false,
        record_frozen_unfenced: false,
        remove_unfenced: false,
    },
);

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    #[test]
    fn moves_keep_one_server_per_slot_and_every_acknowledged_write(
        steps in proptest::collection::vec(step(), 1..80)
    ) {
        run(&steps, NO_BUGS)?;
    }

    #[test]
    fn moves_back_and_forth_at_one_site_keep_every_acknowledged_write(
        steps in proptest::collection::vec(step_at_one_site(), 1..80)
    ) {
        run(&steps, NO_BUGS)?;
    }
}

/// The seed of every knob's search. Fixed: with a random one, a search of 4,096 cases
/// missed `receive_before_seeing_move` once in CI (2026-12-05), so a knob's catch was
/// a matter of luck. Seeds 1 to 7 each catch all three knobs; with 6 the searches end
/// soonest (about 10 s for the slowest in a debug build). The knob-free properties
/// above still draw random cases.
const SEARCH_SEED: u64 = 6;

/// The search finds a violation of one of `invariants` with a knob on.
fn search_catches(
    bugs: (PlacementBugs, OperatorBugs),
    invariants: &[&str],
    steps: impl Strategy<Value = Step>,
) {
    let mut runner = TestRunner::new(Config {
        cases: 4_096,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(SEARCH_SEED),
        ..Config::default()
    });
    let found = runner.run(&proptest::collection::vec(steps, 1..80), |steps| {
        run(&steps, bugs)
    });
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
    let bugs = (
        PlacementBugs {
            serve_while_frozen: true,
            ..NO_BUGS.0
        },
        NO_BUGS.1,
    );
    // The frozen source's writes after the final copy are lost, or it serves beside
    // the target: whichever the search meets first.
    search_catches(
        bugs,
        &["*one-server-per-slot*", "*moves-keep-writes*"],
        step(),
    );
}

#[test]
fn the_search_catches_a_move_finished_without_its_final_copy() {
    let bugs = (
        NO_BUGS.0,
        OperatorBugs {
            finish_without_final_copy: true,
            ..OperatorBugs::NONE
        },
    );
    search_catches(bugs, &["*moves-keep-writes*"], step());
}

/// A move by hand: begun, copied, a write at the source, frozen, copied again,
/// finished; the target then serves, with the write.
#[test]
fn a_move_finishes_and_its_target_serves_with_every_write() {
    let key = 0; // probes()[0] = [0], in range 0, whose replica 1 is on server 0
    let mut steps = vec![
        Step::Write { key, slot: 0 },
        Step::Operate {
            operator: 0,
            range: 0,
            slot: 0,
            to: 1,
            same_site: false,
        }, // begin
        Step::Operate {
            operator: 0,
            range: 0,
            slot: 0,
            to: 1,
            same_site: false,
        }, // bulk copy
        Step::Write { key, slot: 0 },
    ];
    steps.extend((0..5).map(|_| Step::Operate {
        operator: 0,
        range: 0,
        slot: 0,
        to: 1,
        same_site: false,
    })); // freeze, fence, record, final copy, finish
    steps.push(Step::Read {
        server: 1,
        newest: true,
        pick: 0,
    });
    run(&steps, NO_BUGS).unwrap();
    let mut world = World::new(NO_BUGS);
    for step in &steps {
        world.apply(step);
    }
    let moved = world.stored().range_of(&[0]).clone();
    assert_eq!(moved.slot(ReplicaId(1)).unwrap().server, ServerId(1));
    assert!(moved.moving.is_none());
    assert_eq!(
        world
            .node(ServerId(1))
            .rows
            .get(&(vec![0], ReplicaId(1)))
            .map(BTreeSet::len),
        Some(2)
    );
    assert!(matches!(
        world
            .node(ServerId(1))
            .placement
            .judge(&[0], ReplicaId(1), None),
        Serving::Serve { .. }
    ));
    assert!(
        run(
            &steps,
            (
                NO_BUGS.0,
                OperatorBugs {
                    finish_without_final_copy: true,
                    ..OperatorBugs::NONE
                }
            )
        )
        .is_err()
    );
}

#[test]
fn the_search_catches_a_target_taking_a_copy_before_it_sees_the_move() {
    let bugs = (
        PlacementBugs {
            receive_before_seeing_move: true,
            ..NO_BUGS.0
        },
        NO_BUGS.1,
    );
    // The copy is lost when the target read a placement from before the move only
    // after taking it, and kept the range in that placement's predecessor: the slot
    // moved away from it and back. A search that moves one slot back and forth
    // between the two servers of its site meets that often.
    search_catches(bugs, &["*moves-keep-writes*"], step_at_one_site());
}

/// Steps that move only slot 2 (site 1, two servers), between its site's servers.
fn step_at_one_site() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<usize>(), any::<bool>(), any::<usize>())
            .prop_map(|(server, newest, pick)| Step::Read { server, newest, pick }),
        6 => (0..OPERATORS, any::<usize>(), any::<usize>())
            .prop_map(|(operator, range, to)| Step::Operate { operator, range, slot: 1, to, same_site: true }),
        1 => (0..OPERATORS).prop_map(|operator| Step::CrashOperator { operator }),
        4 => any::<usize>().prop_map(|key| Step::Write { key, slot: 1 }),
    ]
}

/// What the search first found (CI, 2026-12-03), before targets checked that they had
/// seen a move: a slot moves from server X to server Y and back. X, its placement
/// still from before the first move finished, takes the second move's copies, then
/// reads the placement that finished the first move (in which it keeps nothing of the
/// range) and retires the rows it was just given.
#[test]
fn a_target_behind_the_move_reads_the_placement_before_taking_the_copy() {
    let away_and_back = |bugs| -> Result<(), TestCaseError> {
        let mut world = World::new(bugs);
        let key = vec![135u8];
        let range = world.stored().range_of(&key).clone();
        let slot = ReplicaId(2);
        let first = range.slot(slot).unwrap().server;
        let other = if first == ServerId(11) {
            ServerId(10)
        } else {
            ServerId(11)
        };
        // probes()[18] is [135]; topology slot 1 is replica 2.
        world.apply(&Step::Write { key: 18, slot: 1 });
        world.check("the write")?;
        let mut finished = Vec::new();
        for to in [other, first] {
            let request = MoveRequest {
                range: range.id,
                replica: slot,
                to,
            };
            world.operators[0] = Some((request, Progress::default()));
            while world.operate(0) {
                world.check("a move")?;
            }
            finished.push(world.stored().version());
        }
        let old = world
            .history
            .iter()
            .find(|p| p.version() == finished[0])
            .unwrap()
            .clone();
        world.node(first).observe(old);
        world.check("the first server reads the placement that finished the first move")
    };
    away_and_back(NO_BUGS).unwrap();
    let eager = (
        PlacementBugs {
            receive_before_seeing_move: true,
            ..NO_BUGS.0
        },
        NO_BUGS.1,
    );
    let lost = away_and_back(eager).unwrap_err().to_string();
    assert!(lost.contains("*moves-keep-writes*"), "{lost}");
}
