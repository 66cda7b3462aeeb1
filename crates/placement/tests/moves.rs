//! *one-server-per-slot* under arbitrary interleavings: an operator splits ranges and
//! moves slots (begin, freeze at the source, record, finish or abort), while every
//! server reads placements late, in its own order, and restarts. After every step, no
//! group's slot is served by two servers. The same search with the
//! `serve_while_frozen` knob must find a violation, or it proves nothing.

use std::collections::BTreeMap;

use megastore_placement::{
    MovePhase, Placement, PlacementBugs, Server, ServerId, ServerPlacement, Serving,
};
use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

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
    BeginMove {
        range: usize,
        slot: usize,
        to: usize,
    },
    /// The operator asks a move's source to freeze; if it does, the freeze is recorded.
    Freeze {
        range: usize,
    },
    Finish {
        range: usize,
    },
    Abort {
        range: usize,
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
        2 => (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(range, slot, to)| Step::BeginMove { range, slot, to }),
        2 => any::<usize>().prop_map(|range| Step::Freeze { range }),
        2 => any::<usize>().prop_map(|range| Step::Finish { range }),
        1 => any::<usize>().prop_map(|range| Step::Abort { range }),
        1 => any::<usize>().prop_map(|server| Step::Restart { server }),
    ]
}

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

/// Keys probed after every step: both sides of every default split point, and more.
fn probes() -> Vec<Vec<u8>> {
    (0..=255u8)
        .step_by(15)
        .flat_map(|b| [vec![b], vec![b, 0x80]])
        .collect()
}

/// Runs `steps` and checks *one-server-per-slot* after each.
fn run(steps: &[Step], bugs: PlacementBugs) -> Result<(), TestCaseError> {
    let initial = Placement::initial(servers(), &topology(), 2).unwrap();
    let mut history = vec![initial.clone()];
    let mut fleet: Vec<ServerPlacement> = servers()
        .iter()
        .map(|s| ServerPlacement::new(s.id, initial.clone(), BTreeMap::new(), bugs).0)
        .collect();
    let probes = probes();
    for step in steps {
        let stored = history.last().unwrap().clone();
        let range_at = |pick: usize| stored.ranges()[pick % stored.ranges().len()].clone();
        let next = match step {
            Step::Read {
                server,
                newest,
                pick,
            } => {
                let count = fleet.len();
                let server = &mut fleet[server % count];
                let from = server.view().version().0 as usize; // versions count from 1
                let newer = &history[from.min(history.len())..];
                if !newer.is_empty() {
                    let chosen = if *newest {
                        newer.len() - 1
                    } else {
                        pick % newer.len()
                    };
                    server.observe(newer[chosen].clone());
                }
                None
            }
            Step::Split { range, at } => stored.split(range_at(*range).id, at).ok(),
            Step::BeginMove { range, slot, to } => {
                let range = range_at(*range);
                let slot = &range.slots[slot % range.slots.len()];
                let to = servers()[to % servers().len()].id;
                stored.begin_move(range.id, slot.replica, to).ok()
            }
            Step::Freeze { range } => {
                let range = range_at(*range);
                match &range.moving {
                    Some(m) if m.phase == MovePhase::Copying => {
                        let source = fleet.iter_mut().find(|s| s.server() == m.from).unwrap();
                        // The source freezes only if its placement shows the move;
                        // only its answer lets the freeze be recorded.
                        match source.freeze(range.id, m.id) {
                            Ok(()) => stored.record_frozen(range.id, m.id).ok(),
                            Err(_) => None,
                        }
                    }
                    _ => None,
                }
            }
            Step::Finish { range } => {
                let range = range_at(*range);
                range
                    .moving
                    .and_then(|m| stored.finish_move(range.id, m.id).ok())
            }
            Step::Abort { range } => {
                let range = range_at(*range);
                range
                    .moving
                    .and_then(|m| stored.abort_move(range.id, m.id).ok())
            }
            Step::Restart { server } => {
                let index = server % fleet.len();
                let old = &fleet[index];
                let restarted = ServerPlacement::new(
                    old.server(),
                    old.view().clone(),
                    old.frozen().clone(),
                    bugs,
                )
                .0;
                fleet[index] = restarted;
                None
            }
        };
        history.extend(next);
        for key in &probes {
            for replica in topology().replicas() {
                let serving: Vec<ServerId> = fleet
                    .iter()
                    .filter(|s| matches!(s.judge(key, replica.id, None), Serving::Serve { .. }))
                    .map(|s| s.server())
                    .collect();
                prop_assert!(
                    serving.len() <= 1,
                    "*one-server-per-slot*: replica {} of key {key:?} served by {serving:?} after {step:?}",
                    replica.id.0
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    #[test]
    fn no_slot_is_ever_served_by_two_servers(steps in proptest::collection::vec(step(), 1..60)) {
        run(&steps, PlacementBugs::default())?;
    }
}

#[test]
fn the_search_catches_a_source_serving_while_frozen() {
    let mut runner = TestRunner::new(Config {
        cases: 4_096,
        failure_persistence: None,
        ..Config::default()
    });
    let bugs = PlacementBugs {
        serve_while_frozen: true,
    };
    let found = runner.run(&proptest::collection::vec(step(), 1..60), |steps| {
        run(&steps, bugs)
    });
    assert!(found.is_err(), "serve_while_frozen went unnoticed");
}

/// The moves finish and are served somewhere: the search reaches the flips it checks.
#[test]
fn a_move_finishes_and_its_target_serves() {
    let steps = vec![
        Step::BeginMove {
            range: 0,
            slot: 0,
            to: 1,
        },
        Step::Read {
            server: 0,
            newest: true,
            pick: 0,
        },
        Step::Freeze { range: 0 },
        Step::Finish { range: 0 },
        Step::Read {
            server: 1,
            newest: true,
            pick: 0,
        },
    ];
    run(&steps, PlacementBugs::default()).unwrap();
    let bugs = PlacementBugs {
        serve_while_frozen: true,
    };
    assert!(run(&steps, bugs).is_err());
}
