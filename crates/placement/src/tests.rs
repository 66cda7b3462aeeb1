use std::collections::BTreeMap;

use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};

use crate::*;

/// The default topology's slots: full at sites 0 and 1, a witness at 2, a read-only
/// replica at 3.
pub(crate) fn slots() -> Topology {
    let info = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    Topology::new(vec![
        info(1, ReplicaKind::Full, 0),
        info(2, ReplicaKind::Full, 1),
        info(3, ReplicaKind::Witness, 2),
        info(4, ReplicaKind::ReadOnly, 3),
    ])
    .unwrap()
}

/// Three servers at each of sites 0 and 1, one at 2 and 3: ids `site * 10 + n`.
pub(crate) fn servers() -> Vec<Server> {
    let mut all = Vec::new();
    for (site, count) in [(0u16, 3u16), (1, 3), (2, 1), (3, 1)] {
        for n in 0..count {
            all.push(Server {
                id: ServerId(site * 10 + n),
                site: SiteId(site),
            });
        }
    }
    all
}

pub(crate) fn placement(ranges: u32) -> Placement {
    Placement::initial(servers(), &slots(), ranges).unwrap()
}

#[test]
fn the_default_placement_splits_the_key_prefix_evenly_and_deals_slots_round_robin() {
    let p = placement(4);
    let starts: Vec<_> = p.ranges().iter().map(|r| r.start.clone()).collect();
    assert_eq!(
        starts,
        vec![vec![], vec![0x40, 0], vec![0x80, 0], vec![0xc0, 0]]
    );
    assert_eq!(p.ranges()[3].end, None);
    let site0: Vec<_> = p
        .ranges()
        .iter()
        .map(|r| r.slot(ReplicaId(1)).unwrap().server)
        .collect();
    assert_eq!(
        site0,
        vec![ServerId(0), ServerId(1), ServerId(2), ServerId(0)]
    );
    assert!(
        p.ranges()
            .iter()
            .all(|r| r.slot(ReplicaId(3)).unwrap().server == ServerId(20))
    );
    assert_eq!(p.version(), Version(1));
    // One range: the whole key space.
    let one = placement(1);
    assert_eq!(
        (one.ranges()[0].start.as_slice(), &one.ranges()[0].end),
        (&[][..], &None)
    );
}

#[test]
fn a_default_placement_names_what_it_lacks() {
    let too_few = servers()
        .into_iter()
        .filter(|s| s.site != SiteId(2))
        .collect();
    let err = Placement::initial(too_few, &slots(), 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no default placement: site 2 has 0 server(s) for 1 replica(s)"
    );
    assert!(matches!(
        Placement::initial(servers(), &slots(), 0),
        Err(ChangeError::Initial(_))
    ));
    let mut twice = servers();
    twice.push(twice[0].clone());
    assert_eq!(
        Placement::initial(twice, &slots(), 2).unwrap_err(),
        ChangeError::DuplicateServer(ServerId(0))
    );
}

#[test]
fn every_key_falls_in_exactly_the_range_whose_bounds_hold_it() {
    let p = placement(4);
    for key in [
        &[][..],
        &[0],
        &[0x3f, 0xff, 9],
        &[0x40],
        &[0x40, 0],
        &[0xc0, 0],
        &[0xff; 9],
    ] {
        let holding: Vec<_> = p.ranges().iter().filter(|r| r.contains(key)).collect();
        assert_eq!(holding.len(), 1, "{key:?}");
        assert_eq!(p.range_of(key).id, holding[0].id, "{key:?}");
    }
}

#[test]
fn a_split_keeps_the_replica_set_and_gives_both_halves_a_new_epoch() {
    let p = placement(2);
    let split = p.split(RangeId(0), b"\x20user").unwrap();
    assert_eq!(split.version(), Version(2));
    let [left, right, last] = split.ranges() else {
        panic!("three ranges")
    };
    assert_eq!(
        (left.id, right.id, last.id),
        (RangeId(0), RangeId(2), RangeId(1))
    );
    assert_eq!(left.end.as_deref(), Some(&b"\x20user"[..]));
    assert_eq!(right.start, b"\x20user");
    assert_eq!(right.end, Some(vec![0x80, 0]));
    assert_eq!(
        (left.epoch, right.epoch, last.epoch),
        (Version(2), Version(2), Version(1))
    );
    assert_eq!(left.slots, right.slots);
    assert_eq!(split.range_of(b"\x20user").id, RangeId(2));
    // The key must lie strictly inside.
    for at in [&[][..], &[0x80, 0], &[0x90]] {
        assert!(
            matches!(
                split.split(RangeId(0), at),
                Err(ChangeError::SplitOutside { .. })
            ),
            "{at:?}"
        );
    }
    assert_eq!(
        split.split(RangeId(9), b"x"),
        Err(ChangeError::UnknownRange(RangeId(9)))
    );
}

#[test]
fn a_split_at_a_key_finds_its_range_and_a_repeated_split_changes_nothing() {
    let p = placement(2);
    let at = b"\x20user";
    let SplitAt::Made(split) = p.split_at(None, at).unwrap() else {
        panic!("split")
    };
    assert_eq!(split, p.split(RangeId(0), at).unwrap());
    let (left, right) = split.ranges_meeting_at(at).unwrap();
    assert_eq!((left.id, right.id), (RangeId(0), RangeId(2)));
    assert_eq!(p.ranges_meeting_at(at), None, "not split yet");
    // Again, by either half or by none: already made.
    for named in [None, Some(RangeId(0)), Some(RangeId(2))] {
        assert_eq!(
            split.split_at(named, at),
            Ok(SplitAt::AlreadySplit),
            "{named:?}"
        );
    }
    // A range that neither holds the key nor ends there is refused, as is an unknown one.
    assert!(matches!(
        split.split_at(Some(RangeId(1)), at),
        Err(ChangeError::SplitOutside {
            range: RangeId(1),
            ..
        })
    ));
    assert_eq!(
        split.split_at(Some(RangeId(9)), at),
        Err(ChangeError::UnknownRange(RangeId(9)))
    );
    assert!(matches!(
        split.split_at(Some(RangeId(1)), b"\x10"),
        Err(ChangeError::SplitOutside { .. })
    ));
    assert_eq!(split.split_at(None, b""), Err(ChangeError::SplitAtStart));
}

#[test]
fn a_move_hands_the_slot_over_only_after_its_source_froze() {
    let p = placement(2);
    let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(2)).unwrap();
    let move_id = begun.version();
    let m = begun.range(RangeId(0)).unwrap().moving.clone().unwrap();
    assert_eq!(
        (m.from, m.to, m.phase),
        (ServerId(0), ServerId(2), MovePhase::Copying)
    );
    // Serving has not changed.
    assert_eq!(begun.range(RangeId(0)).unwrap().epoch, Version(1));
    assert_eq!(
        begun.finish_move(RangeId(0), move_id),
        Err(ChangeError::NotFrozen {
            range: RangeId(0),
            move_id
        })
    );
    assert!(matches!(
        begun.split(RangeId(0), &[9]),
        Err(ChangeError::Moving { .. })
    ));
    assert!(matches!(
        begun.begin_move(RangeId(0), ReplicaId(2), ServerId(12)),
        Err(ChangeError::Moving { .. })
    ));
    let frozen = begun.record_frozen(RangeId(0), move_id).unwrap();
    let done = frozen.finish_move(RangeId(0), move_id).unwrap();
    let range = done.range(RangeId(0)).unwrap();
    assert_eq!(range.slot(ReplicaId(1)).unwrap().server, ServerId(2));
    assert_eq!((range.epoch, range.moving.clone()), (done.version(), None));
    assert_eq!(
        done.abort_move(RangeId(0), move_id),
        Err(ChangeError::NoSuchMove {
            range: RangeId(0),
            move_id
        })
    );
    // An abort leaves the slot and its epoch where they were.
    let aborted = frozen.abort_move(RangeId(0), move_id).unwrap();
    assert_eq!(
        aborted.range(RangeId(0)).unwrap().slots,
        p.range(RangeId(0)).unwrap().slots
    );
    assert_eq!(aborted.range(RangeId(0)).unwrap().epoch, Version(1));
}

#[test]
fn a_move_names_what_is_wrong_with_it() {
    let p = placement(2);
    assert_eq!(
        p.begin_move(RangeId(0), ReplicaId(1), ServerId(12))
            .unwrap_err()
            .to_string(),
        "server-12 is at site 1, but replica 1 of range-0 is at site 0"
    );
    assert_eq!(
        p.begin_move(RangeId(0), ReplicaId(1), ServerId(0))
            .unwrap_err(),
        ChangeError::AlreadyHolds {
            range: RangeId(0),
            server: ServerId(0),
            replica: ReplicaId(1)
        }
    );
    assert_eq!(
        p.begin_move(RangeId(0), ReplicaId(7), ServerId(1))
            .unwrap_err(),
        ChangeError::UnknownSlot {
            range: RangeId(0),
            replica: ReplicaId(7)
        }
    );
    assert_eq!(
        p.begin_move(RangeId(0), ReplicaId(1), ServerId(99))
            .unwrap_err(),
        ChangeError::UnknownServer(ServerId(99))
    );
}

#[test]
fn a_stored_placement_round_trips_and_a_broken_one_is_refused_by_name() {
    let p = placement(3).split(RangeId(1), &[0x60]).unwrap();
    let p = p
        .begin_move(RangeId(2), ReplicaId(2), ServerId(10))
        .unwrap();
    assert_eq!(Placement::decode(&p.encode()).unwrap(), p);

    let mut json: serde_json::Value = serde_json::from_slice(&p.encode()).unwrap();
    json["ranges"][1]["start"] = serde_json::json!([0x50]);
    let err = Placement::decode(&serde_json::to_vec(&json).unwrap()).unwrap_err();
    assert!(err.to_string().contains("*ranges-partition*"), "{err}");

    let mut json: serde_json::Value = serde_json::from_slice(&p.encode()).unwrap();
    json["ranges"][0]["slots"][1]["server"] = serde_json::json!(0);
    let err = Placement::decode(&serde_json::to_vec(&json).unwrap()).unwrap_err();
    assert!(err.to_string().contains("*slot-at-its-site*"), "{err}");

    let err = Placement::decode(b"{\"version\": 1}").unwrap_err();
    assert!(err.to_string().contains("missing field"), "{err}");
}

#[test]
fn a_source_serves_until_it_freezes_and_its_target_only_after_the_flip() {
    let p = placement(1);
    let key = b"\x10group";
    let (mut source, _) = ServerPlacement::new(
        ServerId(0),
        p.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    let (mut target, _) = ServerPlacement::new(
        ServerId(1),
        p.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    let serve = Serving::Serve {
        range: RangeId(0),
        epoch: Version(1),
    };
    assert_eq!(source.judge(key, ReplicaId(1), Some(Version(1))), serve);
    assert_eq!(
        target.judge(key, ReplicaId(1), None),
        Serving::WrongServer {
            range: RangeId(0),
            epoch: Version(1)
        }
    );
    // The wrong slot, and a caller ahead of or behind the server.
    assert!(matches!(
        source.judge(key, ReplicaId(2), None),
        Serving::WrongServer { .. }
    ));
    assert_eq!(
        source.judge(key, ReplicaId(1), Some(Version(5))),
        Serving::Refresh { asked: Version(5) }
    );

    let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(1)).unwrap();
    let move_id = begun.version();
    // A source that has not read the move refuses to freeze for it.
    assert!(source.freeze(RangeId(0), move_id).is_err());
    // A target that has not read the move refuses its copy; having read it, it names
    // the range's span. The source takes no copy of its own move.
    assert!(target.receive(RangeId(0), move_id).is_err());
    assert_eq!(source.observe(begun.clone()), Observed::default());
    assert_eq!(target.observe(begun.clone()), Observed::default());
    assert_eq!(
        target.receive(RangeId(0), move_id),
        Ok(Span {
            start: vec![],
            end: None
        })
    );
    assert!(source.receive(RangeId(0), move_id).is_err());
    assert_eq!(source.judge(key, ReplicaId(1), None), serve);
    source.freeze(RangeId(0), move_id).unwrap();
    assert_eq!(
        source.judge(key, ReplicaId(1), None),
        Serving::Frozen {
            range: RangeId(0),
            move_id
        }
    );
    // The target refuses to freeze a move away from someone else.
    assert!(target.freeze(RangeId(0), move_id).is_err());

    let done = begun
        .record_frozen(RangeId(0), move_id)
        .unwrap()
        .finish_move(RangeId(0), move_id)
        .unwrap();
    assert_eq!(target.observe(done.clone()), Observed::default());
    assert_eq!(
        target.judge(key, ReplicaId(1), None),
        Serving::Serve {
            range: RangeId(0),
            epoch: done.version()
        }
    );
    // The source, even with an old placement, stays frozen; with the new one it retires
    // the whole range.
    assert!(matches!(
        source.judge(key, ReplicaId(1), None),
        Serving::Frozen { .. }
    ));
    let seen = source.observe(done.clone());
    assert_eq!(seen.unfrozen, vec![]);
    assert_eq!(
        seen.retire,
        vec![Span {
            start: vec![],
            end: None
        }]
    );
    assert!(source.frozen().is_empty());
    assert!(matches!(
        source.judge(key, ReplicaId(1), None),
        Serving::WrongServer { .. }
    ));
    // An older placement is ignored.
    assert_eq!(source.observe(p), Observed::default());
    assert_eq!(source.view().version(), done.version());
}

#[test]
fn an_aborted_move_unfreezes_its_source_and_retires_its_targets_copy() {
    let p = placement(1);
    let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(1)).unwrap();
    let move_id = begun.version();
    let (mut source, _) = ServerPlacement::new(
        ServerId(0),
        begun.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    let (mut target, _) = ServerPlacement::new(
        ServerId(1),
        begun.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    source.freeze(RangeId(0), move_id).unwrap();
    let aborted = begun
        .record_frozen(RangeId(0), move_id)
        .unwrap()
        .abort_move(RangeId(0), move_id)
        .unwrap();
    let seen = source.observe(aborted.clone());
    assert_eq!((seen.unfrozen, seen.retire), (vec![RangeId(0)], vec![]));
    assert!(matches!(
        source.judge(b"k", ReplicaId(1), None),
        Serving::Serve { .. }
    ));
    assert_eq!(
        target.observe(aborted).retire,
        vec![Span {
            start: vec![],
            end: None
        }]
    );

    // A restarted source that persisted a freeze reconciles it with what it reads.
    let frozen = BTreeMap::from([(RangeId(0), move_id)]);
    let (restarted, seen) = ServerPlacement::new(
        ServerId(0),
        begun.clone(),
        frozen.clone(),
        PlacementBugs::default(),
    );
    assert_eq!(seen.unfrozen, vec![]);
    assert!(matches!(
        restarted.judge(b"k", ReplicaId(1), None),
        Serving::Frozen { .. }
    ));
    let aborted = begun.abort_move(RangeId(0), move_id).unwrap();
    let (restarted, seen) =
        ServerPlacement::new(ServerId(0), aborted, frozen, PlacementBugs::default());
    assert_eq!(seen.unfrozen, vec![RangeId(0)]);
    assert!(restarted.frozen().is_empty());
}

#[test]
fn a_server_retires_only_the_part_of_a_split_range_that_moved_away() {
    let p = placement(1)
        .split(RangeId(0), &[0x40])
        .unwrap()
        .split(RangeId(1), &[0x80])
        .unwrap();
    let (mut server, _) = ServerPlacement::new(
        ServerId(0),
        p.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    // The middle range [0x40, 0x80) moves to server 1.
    let middle = p.range_of(&[0x50]).id;
    let begun = p.begin_move(middle, ReplicaId(1), ServerId(1)).unwrap();
    let id = begun.version();
    let done = begun
        .record_frozen(middle, id)
        .unwrap()
        .finish_move(middle, id)
        .unwrap();
    let seen = server.observe(done);
    assert_eq!(
        seen.retire,
        vec![Span {
            start: vec![0x40],
            end: Some(vec![0x80])
        }]
    );
}

#[test]
fn a_cluster_of_one_server_per_replica_is_one_range_on_its_own_replicas() {
    // Two replicas at one site, listed against id order.
    let info = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    let topology = Topology::new(vec![
        info(5, ReplicaKind::Full, 0),
        info(1, ReplicaKind::Witness, 0),
        info(2, ReplicaKind::Full, 1),
    ])
    .unwrap();
    let p = Placement::one_server_per_replica(&topology);
    let [range] = p.ranges() else {
        panic!("one range")
    };
    assert_eq!((range.start.as_slice(), &range.end), (&[][..], &None));
    for slot in &range.slots {
        assert_eq!(slot.server, ServerId(slot.replica.0));
    }
    assert_eq!(p.servers().count(), 3);
    assert_eq!(Placement::decode(&p.encode()).unwrap(), p);
}

#[test]
fn a_replica_that_joins_gets_a_slot_of_every_range_on_a_server_of_its_own() {
    let split = Placement::one_server_per_replica(&slots())
        .split(RangeId(0), b"m")
        .unwrap();
    let joining = ReplicaInfo {
        id: ReplicaId(5),
        kind: ReplicaKind::Full,
        site: SiteId(2),
    };
    let grown = split.add_replica(&joining, ServerId(5)).unwrap();
    assert_eq!(grown.version(), Version(split.version().0 + 1));
    for range in grown.ranges() {
        let slot = range.slot(ReplicaId(5)).expect("a slot of every range");
        assert_eq!(
            (slot.server, slot.site, slot.kind),
            (ServerId(5), SiteId(2), ReplicaKind::Full)
        );
        assert_eq!(range.epoch, grown.version(), "who serves it changed");
    }
    // Joining again (an answer lost) changes nothing.
    assert_eq!(grown.add_replica(&joining, ServerId(5)).unwrap(), grown);
    // A server id some other replica's server has is refused, by name.
    let other = ReplicaInfo {
        id: ReplicaId(6),
        ..joining
    };
    assert_eq!(
        grown.add_replica(&other, ServerId(3)).unwrap_err(),
        ChangeError::ServerTaken {
            replica: ReplicaId(6),
            server: ServerId(3)
        }
    );
    // A second voter joining would be each range's second voter change
    // (`voters.rs`): refused; a read-only replica does not vote, and joins.
    assert!(matches!(
        grown.add_replica(&other, ServerId(6)).unwrap_err(),
        ChangeError::VotersChanged { .. }
    ));
    let reader = ReplicaInfo {
        kind: ReplicaKind::ReadOnly,
        ..other
    };
    assert!(grown.add_replica(&reader, ServerId(6)).is_ok());
}

/// docs/scaling.md quotes this: what a range costs in the stored placement.
#[test]
fn a_stored_range_costs_about_three_hundred_bytes() {
    let p = placement(1_000);
    let per_range = p.encode().len() / 1_000;
    assert!(
        (250..=320).contains(&per_range),
        "{per_range} bytes per range"
    );
}

/// *frozen-once-recorded*: a source that restarts without the freeze it acknowledged
/// (its store was lost) is frozen by a placement that records the move frozen, whether
/// it starts on that placement or reads it later.
#[test]
fn a_move_recorded_frozen_freezes_a_source_that_lost_its_freeze() {
    let p = placement(1);
    let key = b"\x10group";
    let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(1)).unwrap();
    let move_id = begun.version();
    let recorded = begun.record_frozen(RangeId(0), move_id).unwrap();
    let frozen = Serving::Frozen {
        range: RangeId(0),
        move_id,
    };
    let (started, _) = ServerPlacement::new(
        ServerId(0),
        recorded.clone(),
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    assert_eq!(started.judge(key, ReplicaId(1), None), frozen);
    assert_eq!(started.frozen().get(&RangeId(0)), Some(&move_id));
    // Before the move is recorded frozen, a source without its freeze serves.
    let (mut behind, _) = ServerPlacement::new(
        ServerId(0),
        begun,
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    assert!(matches!(
        behind.judge(key, ReplicaId(1), None),
        Serving::Serve { .. }
    ));
    behind.observe(recorded.clone());
    assert_eq!(behind.judge(key, ReplicaId(1), None), frozen);
    // Only the source is frozen by it.
    let (target, _) = ServerPlacement::new(
        ServerId(1),
        recorded,
        BTreeMap::new(),
        PlacementBugs::default(),
    );
    assert!(target.frozen().is_empty());
}

/// The final copy is taken from a source frozen now: refused as not frozen, the
/// operator asks for the freeze again; refused for a lost store, it gives the move up.
#[test]
fn the_operator_refreezes_before_a_refused_final_copy_and_gives_up_on_a_lost_store() {
    let p = placement(1);
    let request = MoveRequest {
        range: RangeId(0),
        replica: ReplicaId(1),
        to: ServerId(1),
    };
    let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(1)).unwrap();
    let move_id = begun.version();
    let recorded = begun.record_frozen(RangeId(0), move_id).unwrap();
    let mut progress = Progress {
        move_id: Some(move_id),
        bulk_copied: true,
        froze: true,
        fenced: true,
        ..Progress::default()
    };
    let step =
        |progress: &mut Progress| next_step(&recorded, &request, progress, OperatorBugs::default());
    assert!(matches!(
        step(&mut progress),
        OperatorStep::Copy { last: true, .. }
    ));
    progress.final_copy_refused(FinalCopyRefused::NotFrozen);
    assert!(
        matches!(step(&mut progress), OperatorStep::Freeze { server, .. } if server == ServerId(0))
    );
    progress.froze = true;
    assert!(matches!(
        step(&mut progress),
        OperatorStep::Copy { last: true, .. }
    ));
    progress.final_copy_refused(FinalCopyRefused::StoreLost);
    match step(&mut progress) {
        OperatorStep::Write { next, .. } => {
            assert!(next.range(RangeId(0)).unwrap().moving.is_none())
        }
        other => panic!("expected the abort, got {other:?}"),
    }
    // An operator that restarts on a move recorded frozen freezes the source first.
    let mut restarted = Progress::default();
    assert!(matches!(step(&mut restarted), OperatorStep::Freeze { .. }));
}

/// A server is added holding nothing: the version moves on, no range's epoch does, a
/// move to it may begin, and adding it again changes nothing (or is refused at another
/// site).
#[test]
fn an_added_server_holds_nothing_until_a_slot_moves_to_it() {
    let p = placement(2);
    let new = Server {
        id: ServerId(5),
        site: SiteId(0),
    };
    assert!(matches!(
        p.begin_move(RangeId(0), ReplicaId(1), new.id),
        Err(ChangeError::UnknownServer(_))
    ));
    let added = p.add_server(new.clone()).unwrap();
    assert_eq!(added.version(), Version(p.version().0 + 1));
    assert_eq!(added.server(new.id), Some(&new));
    for (before, after) in p.ranges().iter().zip(added.ranges()) {
        assert_eq!(before, after, "no range changes");
    }
    assert_eq!(
        added.add_server(new.clone()).unwrap(),
        added,
        "an add retried"
    );
    assert_eq!(
        added.add_server(Server {
            id: new.id,
            site: SiteId(1)
        }),
        Err(ChangeError::ServerElsewhere {
            server: new.id,
            listed: SiteId(0),
            asked: SiteId(1)
        })
    );
    let begun = added.begin_move(RangeId(0), ReplicaId(1), new.id).unwrap();
    assert_eq!(
        begun.range(RangeId(0)).unwrap().moving.as_ref().unwrap().to,
        new.id
    );
}
