//! A coordinator placed on one of many servers (docs/protocol.md, "Placement"): it
//! vouches only for groups of ranges its server holds and is not moving away,
//! acknowledges invalidations only for those, and starts a new epoch when a range
//! arrives — so a range that moved away and came back is not vouched for from what was
//! validated before it left. The knob `vouch-moved-in-range` keeps the epoch, and a
//! test catches it. A slot leaving (a full replica's removal) is vouched for no more
//! (the removal itself: `tests/removal.rs`).

mod support;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorReply, CoordinatorRequest, GroupState, Input, Output,
};
use megastore_placement::{Placement, Range, Server, ServerId};
use megastore_types::{
    ClientId, EgId, NodeId, Position, ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology,
};
use support::{config, eg, query, start_serving, t, validate};

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

/// Two servers at site 0 (replica 1's slots, which the coordinator vouches for).
fn servers() -> Vec<Server> {
    [(0, 0), (1, 0), (10, 1), (20, 2)]
        .into_iter()
        .map(|(id, site)| Server {
            id: ServerId(id),
            site: SiteId(site),
        })
        .collect()
}

/// Two ranges; the range of the test group, its server, and the other site-0 server.
fn start() -> (Placement, Range, ServerId, ServerId) {
    let p = Placement::initial(servers(), &topology(), 2).unwrap();
    let range = p.range_of(&eg().0).clone();
    let holder = range.slot(ReplicaId(1)).unwrap().server;
    let other = if holder == ServerId(0) {
        ServerId(1)
    } else {
        ServerId(0)
    };
    (p, range, holder, other)
}

/// The coordinator of `server`, placed by `view`, holding its lock (epoch 42).
fn coordinator_on(server: ServerId, view: &Placement, bugs: CoordinatorBugs) -> Coordinator {
    // Each server's coordinator holds a lock of its own.
    let lock = megastore_coordinator::coordinator_lock(server);
    start_serving(
        Coordinator::new(config(bugs)).placed(server, view.clone()),
        &lock,
    )
}

/// A writer's invalidation of `eg` at `position`; the coordinator's answer.
fn invalidate(c: &mut Coordinator, eg: &EgId, position: u64) -> CoordinatorReply {
    let writer = NodeId::Client(ClientId(8));
    let request = CoordinatorRequest::Invalidate {
        id: 9,
        eg: eg.clone(),
        position: Position(position),
    };
    let out = c.step(
        t(1.0),
        Input::Request {
            from: writer,
            request,
        },
    );
    match &out[0] {
        Output::Reply { to, reply } if *to == writer => reply.clone(),
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn a_placed_coordinator_vouches_and_counts_invalidations_only_for_groups_it_serves() {
    let (p, _, holder, _) = start();
    let mut c = coordinator_on(holder, &p, CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0, "its own group is vouched");
    assert_eq!(
        invalidate(&mut c, &eg(), 6),
        CoordinatorReply::Invalidated { id: 9 }
    );

    // A group of the other range, whose slot the other site-0 server holds.
    let elsewhere = EgId(b"\xf0elsewhere".to_vec());
    assert_ne!(p.range_of(&elsewhere.0).id, p.range_of(&eg().0).id);
    assert_eq!(
        invalidate(&mut c, &elsewhere, 3),
        CoordinatorReply::NotServed { id: 9 }
    );
    assert_eq!(
        c.group(&elsewhere),
        Some(GroupState::Invalid { at: Position(3) }),
        "recorded all the same"
    );
    assert!(!c.vouches(t(1.0), &elsewhere));
}

#[test]
fn a_range_moving_away_is_vouched_for_no_more_and_its_invalidations_do_not_count() {
    let (p0, range, holder, other) = start();
    let mut c = coordinator_on(holder, &p0, CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0);
    let p1 = p0.begin_move(range.id, ReplicaId(1), other).unwrap();
    assert!(
        !c.knows_placement(p1.version()),
        "the operator waits for this"
    );
    c.step(t(1.0), Input::Placement(p1.clone()));
    assert!(c.knows_placement(p1.version()));
    assert!(!query(&mut c, t(1.0)).0, "moving away: not vouched");
    assert_eq!(
        invalidate(&mut c, &eg(), 6),
        CoordinatorReply::NotServed { id: 9 }
    );
    validate(&mut c, t(1.0), 7, 42);
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Invalid { at: Position(6) }),
        "a validate for a range moving away is ignored"
    );
    // The move's target does not serve it either until the move finishes.
    let mut target = coordinator_on(other, &p1, CoordinatorBugs::NONE);
    assert_eq!(
        invalidate(&mut target, &eg(), 6),
        CoordinatorReply::NotServed { id: 9 }
    );
}

/// The test group's range moves from this coordinator's server to the other and back;
/// whether the coordinator then vouches for it, without any new validate.
fn vouches_after_moving_away_and_back(bugs: CoordinatorBugs) -> bool {
    let (p0, range, holder, other) = start();
    let mut c = coordinator_on(holder, &p0, bugs);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0);
    let mut view = p0;
    for to in [other, holder] {
        let begun = view.begin_move(range.id, ReplicaId(1), to).unwrap();
        let move_id = begun.version();
        c.step(t(2.0), Input::Placement(begun.clone()));
        view = begun
            .record_frozen(range.id, move_id)
            .unwrap()
            .finish_move(range.id, move_id)
            .unwrap();
        c.step(t(2.0), Input::Placement(view.clone()));
        if to == other {
            assert!(!query(&mut c, t(2.0)).0, "moved away: not vouched");
        }
    }
    assert_eq!(
        view.range_of(&eg().0).slot(ReplicaId(1)).unwrap().server,
        holder
    );
    query(&mut c, t(2.0)).0
}

#[test]
fn a_range_that_comes_back_is_not_vouched_for_from_before_it_left() {
    assert!(
        !vouches_after_moving_away_and_back(CoordinatorBugs::NONE),
        "the arrival starts a new epoch"
    );
    let keep = CoordinatorBugs {
        vouch_moved_in_range: true,
        ..CoordinatorBugs::NONE
    };
    assert!(
        vouches_after_moving_away_and_back(keep),
        "with vouch-moved-in-range the old validate still vouches"
    );
}

#[test]
fn a_leaving_slot_is_vouched_for_no_more_from_the_placement_that_began_it() {
    let (p0, range, holder, _) = start();
    let mut c = coordinator_on(holder, &p0, CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0);
    let leaving = p0.begin_removal(ReplicaId(1), &[range.id]).unwrap();
    let (since, servers) = leaving.removal_fence(ReplicaId(1), &[]).unwrap();
    assert_eq!(servers, [holder]);
    assert!(
        !c.knows_placement(since),
        "the operator's fence waits for this"
    );
    c.step(t(1.0), Input::Placement(leaving));
    assert!(c.knows_placement(since));
    assert!(!query(&mut c, t(1.0)).0, "leaving: not vouched");
    assert_eq!(
        invalidate(&mut c, &eg(), 6),
        CoordinatorReply::NotServed { id: 9 },
        "the writer reads the placement: the slot is still this server's, so done"
    );
    validate(&mut c, t(1.0), 7, 42);
    assert!(
        !query(&mut c, t(1.0)).0,
        "a validate does not bring it back"
    );
    // The removal given up, the range arrives again: a new epoch, which vouches for
    // nothing validated before.
    let kept = p0
        .begin_removal(ReplicaId(1), &[range.id])
        .and_then(|l| l.abort_removal(ReplicaId(1), &[]))
        .unwrap();
    c.step(t(1.0), Input::Placement(kept));
    assert_eq!(
        c.epoch(),
        None,
        "its epoch restarts (the lock is taken again)"
    );
    assert!(!query(&mut c, t(1.0)).0);
}

#[test]
fn an_unusable_placement_read_is_asked_again() {
    let (p0, _, holder, _) = start();
    let lock = megastore_coordinator::coordinator_lock(holder);
    let placed = Coordinator::new(config(CoordinatorBugs::NONE)).placed(holder, p0);
    let (mut c, out) = support::take_lock(placed, &lock);
    let (read, _) = support::lock_request(&out);
    // Answered with something that is no placement (a broken file): unusable.
    let broken = megastore_lock::LockFile {
        version: 1,
        contents: b"not a placement".to_vec(),
    };
    let out = support::respond(
        &mut c,
        t(0.3),
        read,
        Ok(megastore_lock::LockReply::File(Some(broken))),
    );
    validate(&mut c, t(0.3), 5, 42);
    assert!(
        !query(&mut c, t(0.3)).0,
        "not read yet: vouches for nothing"
    );
    // It wakes after its retry delay (1 s) and asks again.
    let wake = out.iter().find_map(|o| match o {
        Output::WakeAt(at) => Some(*at),
        _ => None,
    });
    assert_eq!(wake, Some(t(1.3)));
    let out = c.step(t(1.3), Input::Tick);
    let (read, command) = support::lock_request(&out);
    assert!(matches!(
        command,
        megastore_lock::LockCommand::ReadFile { .. }
    ));
    support::respond(
        &mut c,
        t(1.4),
        read,
        Ok(megastore_lock::LockReply::File(None)),
    );
    validate(&mut c, t(1.5), 5, 42);
    assert!(query(&mut c, t(1.5)).0, "read: it vouches");
}
