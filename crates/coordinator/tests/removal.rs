//! Removing a full replica over real cores (docs/protocol.md, "Removing a full
//! replica"): the operator takes every step from the placement core's `removal_step`,
//! the coordinator is the real state machine, and the check is *removed-after-fence*:
//! when a placement that drops a full replica's slot is stored, that slot's
//! coordinator vouches for none of the range's groups — and never does again, even
//! from a new epoch that took its lock with an old placement. Writers counting the set
//! without the slot no longer invalidate that coordinator, so anything it vouched for
//! could be read stale. The knob `remove-unfenced` (the operator skips the fence) and
//! `vouch-before-placement-read` (a new epoch vouches by the placement it had) are
//! each caught.

mod support;

use std::collections::BTreeSet;

use megastore_coordinator::{Coordinator, CoordinatorBugs, Input};
use megastore_lock::{LockFile, LockReply};
use megastore_placement::{
    OperatorBugs, Placement, RemovalStep, Server, ServerId, Version, removal_step,
};
use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};
use support::{config, eg, lock_request, query, respond, start_serving, t, take_lock, validate};

/// The full replica removed.
const LEAVING: ReplicaId = ReplicaId(1);

fn topology() -> Topology {
    let info = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    Topology::new(vec![
        info(1, ReplicaKind::Full, 0),
        info(2, ReplicaKind::Full, 1),
        info(3, ReplicaKind::Full, 2),
    ])
    .unwrap()
}

/// One server per replica; the leaving replica's server, where the test group is.
fn start() -> (Placement, ServerId) {
    let servers = [(0, 0), (10, 1), (20, 2)].map(|(id, site)| Server {
        id: ServerId(id),
        site: SiteId(site),
    });
    let p = Placement::initial(servers.to_vec(), &topology(), 1).unwrap();
    let holder = p.range_of(&eg().0).slot(LEAVING).unwrap().server;
    (p, holder)
}

/// How the leaving replica's coordinator is, while the operator works.
enum Coordinated {
    /// Up, holding its lock; it reads each placement the operator stores only when
    /// the operator has asked it once and found it behind (its follower is slow).
    Behind(Box<Coordinator>),
    /// Down: its lock is free.
    Down,
}

/// Runs the operator to the end; whether the coordinator vouched for the test group
/// when the slot's removal was stored, and the placements stored.
fn remove(mut coordinated: Coordinated, bugs: OperatorBugs) -> (bool, Vec<Placement>) {
    let (mut stored, _) = start();
    let mut history = vec![stored.clone()];
    let mut fenced: BTreeSet<(ServerId, Version)> = BTreeSet::new();
    for _ in 0..8 {
        match removal_step(&stored, LEAVING, &[], &fenced, bugs).unwrap() {
            RemovalStep::Write(next) => {
                let dropped = next.range_of(&eg().0).slot(LEAVING).is_none();
                stored = next;
                history.push(stored.clone());
                if dropped {
                    let vouched = match &coordinated {
                        Coordinated::Behind(c) => c.vouches(t(2.0), &eg()),
                        Coordinated::Down => false,
                    };
                    return (vouched, history);
                }
            }
            RemovalStep::Fence { since, servers } => {
                for server in servers {
                    let is_fenced = match &mut coordinated {
                        Coordinated::Behind(c) => {
                            let knows = c.knows_placement(since);
                            // Asked and behind: its follower catches up before the
                            // next ask.
                            c.step(t(2.0), Input::Placement(stored.clone()));
                            knows
                        }
                        Coordinated::Down => true,
                    };
                    if is_fenced {
                        fenced.insert((server, since));
                    }
                }
            }
            RemovalStep::Done => break,
        }
    }
    panic!("the removal did not end: {history:?}");
}

/// The leaving replica's coordinator, up, holding its lock, vouching for the test
/// group.
fn vouching(holder: ServerId, view: &Placement) -> Coordinator {
    let lock = megastore_coordinator::coordinator_lock(holder);
    let placed = Coordinator::new(config(CoordinatorBugs::NONE)).placed(holder, view.clone());
    let mut c = start_serving(placed, &lock);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0);
    c
}

#[test]
fn a_full_replica_goes_only_once_its_coordinator_vouches_for_none_of_the_range() {
    let (p0, holder) = start();
    let (vouched, history) = remove(
        Coordinated::Behind(Box::new(vouching(holder, &p0))),
        OperatorBugs::NONE,
    );
    assert!(!vouched, "*removed-after-fence*");
    assert_eq!(history.len(), 3, "begin, then remove: {history:?}");
    let range = history[2].range_of(&eg().0);
    assert!(range.slot(LEAVING).is_none() && range.voters_changed.is_some());

    let unfenced = OperatorBugs {
        remove_unfenced: true,
        ..OperatorBugs::NONE
    };
    let (vouched, _) = remove(
        Coordinated::Behind(Box::new(vouching(holder, &p0))),
        unfenced,
    );
    assert!(
        vouched,
        "with remove-unfenced the slot goes while it still vouches"
    );
}

/// The removal is fenced while the coordinator is down; it then takes its lock again
/// in a process that still judges by the placement from before the removal began (a
/// session lost and opened again, its follower cut off): whether it vouches for the
/// test group once a reader validates it, before its placement read comes back.
fn vouches_after_coming_back(bugs: CoordinatorBugs) -> bool {
    let (p0, holder) = start();
    let (vouched, history) = remove(Coordinated::Down, OperatorBugs::NONE);
    assert!(!vouched);
    let removed = history.last().unwrap().clone();
    let lock = megastore_coordinator::coordinator_lock(holder);
    let (mut c, out) = take_lock(Coordinator::new(config(bugs)).placed(holder, p0), &lock);
    let (read, _) = lock_request(&out);
    validate(&mut c, t(0.3), 5, 42);
    let early = query(&mut c, t(0.3)).0;
    let file = LockFile {
        version: 9,
        contents: removed.encode(),
    };
    respond(&mut c, t(0.4), read, Ok(LockReply::File(Some(file))));
    validate(&mut c, t(0.5), 5, 42);
    early || query(&mut c, t(0.5)).0
}

#[test]
fn a_coordinator_fenced_while_down_does_not_vouch_when_it_comes_back() {
    assert!(!vouches_after_coming_back(CoordinatorBugs::NONE));
    let early = CoordinatorBugs {
        vouch_before_placement_read: true,
        ..CoordinatorBugs::NONE
    };
    assert!(
        vouches_after_coming_back(early),
        "with vouch-before-placement-read it vouches by the placement from before"
    );
}
