//! The sweep truncates busy groups as they grow, however many there are: a group whose
//! log outgrew `probe_above` positions is probed at the next sweep, not only in its
//! round-robin turn (one group a sweep), which with many busy groups came so seldom
//! that their logs — in memory and in their root rows — grew for as long as the writes
//! went on. A replica that does not answer (down, or cut off) holds truncation back
//! only until a group's log outgrew the outage bound. A replica that starts probes
//! every registered group within its first sweeps, not one a sweep, and every group
//! the other replicas' registries list that it never persisted. A snapshot install
//! that does not happen is reported to the host.

mod support;

use std::collections::BTreeSet;

use megastore_paxos::{
    Batch, DUE_PROBES_MAX, FailedInstall, InstallFailure, LogEntry, LogState, Message,
    ProtocolBugs, Replica, ReplicaConfig, ReplicaInput, ReplicaLag, ReplicaReply, ReplicaRequest,
};
use megastore_rowstore::MemoryStore;
use megastore_types::{EgId, NodeId, Position, ReplicaId, Time};
use support::{CLIENT, OUTAGE_LOG_MAX, topology};

/// Visible positions above its truncation point past which a group is probed.
const PROBE_ABOVE: u64 = 8;

fn at(ms: u64) -> Time {
    Time::from_nanos(ms * 1_000_000)
}

fn replica() -> Replica {
    replica_caching(None)
}

/// Replica 1 with its sweep, keeping `cache_groups` groups loaded.
fn replica_caching(cache_groups: Option<usize>) -> Replica {
    Replica::new(ReplicaConfig {
        id: ReplicaId(1),
        topology: topology(),
        bugs: ProtocolBugs::NONE,
        sweep: Some(support::sweep_of_replica_1(PROBE_ABOVE)),
        rejoining: false,
        cache_groups,
    })
}

fn step(
    replica: &mut Replica,
    store: &MemoryStore,
    now: Time,
    input: ReplicaInput,
) -> Vec<(NodeId, Message)> {
    let mut batch = Batch::new();
    replica.step_into(now, input, store, &mut batch).unwrap();
    batch.release(store).unwrap().sends
}

fn request(replica: &mut Replica, store: &MemoryStore, request: ReplicaRequest) {
    let input = ReplicaInput::Message {
        from: CLIENT,
        message: Message::ReplicaRequest(request),
    };
    step(replica, store, at(0), input);
}

/// Positions 1..=`last` of `eg` accepted and marked visible here (no-ops).
fn write_positions(replica: &mut Replica, store: &MemoryStore, eg: &EgId, last: u64) {
    for p in 1..=last {
        let position = Position(p);
        let ballot = support::ballot(0);
        let (eg, entry) = (eg.clone(), LogEntry::noop());
        request(
            replica,
            store,
            ReplicaRequest::Accept {
                id: 1,
                eg: eg.clone(),
                position,
                ballot,
                entry: entry.clone(),
                grant: false,
                previous_visible: None,
                voters_at: megastore_placement::Version(0),
            },
        );
        request(
            replica,
            store,
            ReplicaRequest::MarkVisible {
                id: 2,
                eg,
                position,
                ballot,
                entry,
            },
        );
    }
}

/// Positions 1..=3 of `eg` here, then none of 4..=6 (missed: down, or the accepts
/// were lost), and 7 marked visible: it lacks chosen positions.
fn write_lacking(replica: &mut Replica, store: &MemoryStore, eg: &EgId) {
    write_positions(replica, store, eg, 3);
    request(
        replica,
        store,
        ReplicaRequest::MarkVisible {
            id: 3,
            eg: eg.clone(),
            position: Position(7),
            ballot: support::ballot(0),
            entry: LogEntry::noop(),
        },
    );
}

/// The groups the sends probe (a `LogState` request to another replica), with the
/// requests themselves.
fn probes(sends: &[(NodeId, Message)]) -> Vec<(ReplicaId, u64, EgId)> {
    sends
        .iter()
        .filter_map(|(to, m)| match (to, m) {
            (NodeId::Replica(r), Message::ReplicaRequest(ReplicaRequest::LogState { id, eg })) => {
                Some((*r, *id, eg.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The groups probed in `sends`.
fn probed_groups(sends: &[(NodeId, Message)]) -> BTreeSet<EgId> {
    probes(sends).into_iter().map(|(_, _, eg)| eg).collect()
}

fn truncated_here(replica: &mut Replica, store: &MemoryStore, eg: &EgId) -> Position {
    let input = ReplicaInput::Message {
        from: CLIENT,
        message: Message::ReplicaRequest(ReplicaRequest::LogState {
            id: 9,
            eg: eg.clone(),
        }),
    };
    step(replica, store, at(0), input)
        .into_iter()
        .find_map(|(_, m)| match m {
            Message::ReplicaReply(ReplicaReply::LogState { state, .. }) => Some(state.truncated),
            _ => None,
        })
        .expect("a log state")
}

#[test]
fn every_group_whose_log_outgrew_the_bound_is_probed_and_truncated_at_the_next_sweep() {
    let store = MemoryStore::new();
    let mut replica = replica();
    let last = 30;
    let groups: Vec<EgId> = (0..20)
        .map(|i| EgId(format!("busy-{i}").into_bytes()))
        .collect();
    for eg in &groups {
        write_positions(&mut replica, &store, eg, last);
    }
    // One quiet group, within the bound: left to its round-robin turn.
    let quiet = EgId(b"quiet".to_vec());
    write_positions(&mut replica, &store, &quiet, PROBE_ABOVE);

    let sends = step(&mut replica, &store, at(1000), ReplicaInput::Tick);
    let probed = probed_groups(&sends);
    for eg in &groups {
        assert!(probed.contains(eg), "{eg:?} not probed; probed: {probed:?}");
    }
    // Every other replica answers: applied everything.
    let state = LogState {
        highest: Position(last),
        visible: Position(last),
        applied: Position(last),
        truncated: Position::NONE,
        next_leader: None,
    };
    for (r, id, eg) in probes(&sends) {
        let state = if eg == quiet {
            LogState {
                highest: Position(PROBE_ABOVE),
                visible: Position(PROBE_ABOVE),
                applied: Position(PROBE_ABOVE),
                ..state
            }
        } else {
            state
        };
        let reply = ReplicaInput::Message {
            from: NodeId::Replica(r),
            message: Message::ReplicaReply(ReplicaReply::LogState { id, state }),
        };
        step(&mut replica, &store, at(1010), reply);
    }
    // Truncated below the last applied position, which is kept (the next position's
    // leader stays known).
    for eg in &groups {
        assert_eq!(truncated_here(&mut replica, &store, eg), Position(last - 1));
    }
    // Within the bound now: the next sweep probes one group at most (the round robin).
    let sends = step(&mut replica, &store, at(2000), ReplicaInput::Tick);
    let probed = probed_groups(&sends);
    assert!(probed.len() <= 1, "{probed:?}");
}

#[test]
fn a_group_lacking_chosen_positions_is_probed_at_the_next_sweep_not_in_its_turn() {
    let store = MemoryStore::new();
    let mut replica = replica();
    let quiet: Vec<EgId> = (0..10)
        .map(|i| EgId(format!("quiet-{i}").into_bytes()))
        .collect();
    for eg in &quiet {
        write_positions(&mut replica, &store, eg, 3);
    }
    let lacking = EgId(b"lacking".to_vec());
    write_lacking(&mut replica, &store, &lacking);
    let sends = step(&mut replica, &store, at(1000), ReplicaInput::Tick);
    let probed = probed_groups(&sends);
    assert!(probed.contains(&lacking), "{probed:?}");
    // The quiet groups wait for their turn: one of them at most (the round robin).
    assert!(probed.len() <= 2, "{probed:?}");
}

#[test]
fn when_more_groups_are_due_than_a_sweep_probes_lacking_ones_go_first_and_the_rest_take_turns() {
    let store = MemoryStore::new();
    let mut replica = replica();
    let outgrown: Vec<EgId> = (0..DUE_PROBES_MAX + 20)
        .map(|i| EgId(format!("busy-{i:04}").into_bytes()))
        .collect();
    for eg in &outgrown {
        write_positions(&mut replica, &store, eg, PROBE_ABOVE + 2);
    }
    // Last in key order.
    let lacking = EgId(b"zz-lacking".to_vec());
    write_lacking(&mut replica, &store, &lacking);
    // Nobody answers (as while a replica is down): the probes run out and the same
    // groups are due at every sweep.
    let mut probed_ever = BTreeSet::new();
    for sweep in 1..=2 {
        let sends = step(&mut replica, &store, at(1000 * sweep), ReplicaInput::Tick);
        let probed = probed_groups(&sends);
        // The due groups a sweep probes, and its one round-robin turn.
        assert!(probed.len() <= DUE_PROBES_MAX + 1, "{}", probed.len());
        assert!(
            probed.contains(&lacking),
            "sweep {sweep} left out the lacking group"
        );
        probed_ever.extend(probed);
    }
    let never: Vec<&EgId> = outgrown
        .iter()
        .filter(|eg| !probed_ever.contains(*eg))
        .collect();
    assert!(never.is_empty(), "never probed in two sweeps: {never:?}");
}

#[test]
fn a_replica_that_does_not_answer_holds_truncation_back_only_up_to_the_outage_bound() {
    let store = MemoryStore::new();
    let mut replica = replica();
    let within = EgId(b"within".to_vec());
    let past = EgId(b"past".to_vec());
    let past_others_behind = EgId(b"past-others-behind".to_vec());
    let last_of = |eg: &EgId| if *eg == within { OUTAGE_LOG_MAX } else { 60 };
    for eg in [&within, &past, &past_others_behind] {
        write_positions(&mut replica, &store, eg, last_of(eg));
    }
    let sends = step(&mut replica, &store, at(1000), ReplicaInput::Tick);
    let asked = probes(&sends);
    // The read-only replica (4) is down; the others answer, having applied what this
    // replica holds — or, for one group, only half of it.
    for (r, id, eg) in asked.into_iter().filter(|(r, _, _)| *r != ReplicaId(4)) {
        let last = Position(last_of(&eg));
        let applied = if eg == past_others_behind {
            Position(30)
        } else {
            last
        };
        let state = LogState {
            highest: last,
            visible: last,
            applied,
            truncated: Position::NONE,
            next_leader: None,
        };
        let reply = ReplicaInput::Message {
            from: NodeId::Replica(r),
            message: Message::ReplicaReply(ReplicaReply::LogState { id, state }),
        };
        step(&mut replica, &store, at(1010), reply);
    }
    // The probes run out (100 ms RPCs) without the read-only replica's answer.
    step(&mut replica, &store, at(1500), ReplicaInput::Tick);
    // Within the bound: held back, as before.
    assert_eq!(
        truncated_here(&mut replica, &store, &within),
        Position::NONE
    );
    // Past it: half the bound stays.
    assert_eq!(
        truncated_here(&mut replica, &store, &past),
        Position(60 - OUTAGE_LOG_MAX / 2)
    );
    // Never below what a replica that answered has not applied (its last applied
    // slot kept, as always).
    assert_eq!(
        truncated_here(&mut replica, &store, &past_others_behind),
        Position(29)
    );
}

#[test]
fn a_replica_that_starts_probes_every_registered_group_within_its_first_sweeps() {
    // 300 idle groups registered (two positions each: nothing due), then a restart:
    // nothing tells the replica which of them it missed writes to while it was down.
    let store = MemoryStore::new();
    let cache = Some(8);
    let mut replica = replica_caching(cache);
    let groups: BTreeSet<EgId> = (0..300)
        .map(|i| EgId(format!("idle-{i:03}").into_bytes()))
        .collect();
    for eg in &groups {
        write_positions(&mut replica, &store, eg, 2);
    }
    let mut replica = replica_caching(cache);
    // The start pass: up to DUE_PROBES_MAX groups of the registry walk a sweep, until it
    // reaches the registry's end.
    let mut probed = BTreeSet::new();
    for (sweep, expected) in [(1, DUE_PROBES_MAX), (2, 300 - DUE_PROBES_MAX)] {
        let sends = step(&mut replica, &store, at(sweep * 1000), ReplicaInput::Tick);
        let these = probed_groups(&sends);
        assert_eq!(these.len(), expected, "sweep {sweep}");
        probed.extend(these);
    }
    assert_eq!(probed, groups, "every registered group probed once");
    // Then the walk takes one group a sweep (the probes' answers never came, so
    // nothing else is due).
    for sweep in 3..8 {
        let sends = step(&mut replica, &store, at(sweep * 1000), ReplicaInput::Tick);
        let these = probed_groups(&sends);
        assert!(these.len() <= 1, "sweep {sweep}: {these:?}");
    }
}

/// The registry listings the sends ask for: to whom, the request's id, and where it
/// stands.
fn listings(sends: &[(NodeId, Message)]) -> Vec<(ReplicaId, u64, Option<EgId>)> {
    sends
        .iter()
        .filter_map(|(to, m)| match (to, m) {
            (
                NodeId::Replica(r),
                Message::ReplicaRequest(ReplicaRequest::ListGroups {
                    id, after, limit, ..
                }),
            ) => {
                assert_eq!(*limit, DUE_PROBES_MAX, "a page is a start pass's sweep");
                Some((*r, *id, after.clone()))
            }
            _ => None,
        })
        .collect()
}

fn named(prefix: &str, range: std::ops::Range<usize>) -> Vec<EgId> {
    range
        .map(|i| EgId(format!("{prefix}-{i:03}").into_bytes()))
        .collect()
}

/// Replica `from`'s answer to listing `id`.
fn groups_from(from: u16, id: u64, groups: &[EgId]) -> ReplicaInput {
    ReplicaInput::Message {
        from: NodeId::Replica(ReplicaId(from)),
        message: Message::ReplicaReply(ReplicaReply::Groups {
            id,
            groups: groups.to_vec(),
        }),
    }
}

#[test]
fn a_replica_that_starts_probes_the_groups_its_peers_hold_and_it_never_persisted() {
    // Groups first written while a replica was down are in no registry of its own, and
    // no later write need reach it: its start pass lists the other replicas'.
    for cache in [None, Some(8)] {
        let store = MemoryStore::new();
        let mut replica = replica_caching(cache);
        let known = named("known", 0..40);
        for eg in &known {
            write_positions(&mut replica, &store, eg, 2);
        }
        let mut replica = replica_caching(cache);
        let sends = step(&mut replica, &store, at(1000), ReplicaInput::Tick);
        let asked = listings(&sends);
        let to: Vec<u16> = asked.iter().map(|(r, _, _)| r.0).collect();
        assert_eq!(
            to,
            [2, 3, 4],
            "{cache:?}: every other replica, from the start"
        );
        assert!(asked.iter().all(|(_, _, after)| after.is_none()));
        let id_of = |r: u16| asked.iter().find(|a| a.0.0 == r).unwrap().1;

        // Replica 2's first page: the groups this one holds, then 216 it never had.
        let new = named("new", 0..231);
        let page: Vec<EgId> = known.iter().chain(&new[..216]).cloned().collect();
        assert_eq!(page.len(), DUE_PROBES_MAX);
        let sends = step(
            &mut replica,
            &store,
            at(1010),
            groups_from(2, id_of(2), &page),
        );
        let probed = probed_groups(&sends);
        let expected: BTreeSet<EgId> = new[..216].iter().cloned().collect();
        assert_eq!(
            probed, expected,
            "{cache:?}: exactly the groups never persisted"
        );
        // Replica 3 holds one more group, and its registry ends there.
        let only_at_3 = named("only-at-3", 0..1);
        let sends = step(
            &mut replica,
            &store,
            at(1020),
            groups_from(3, id_of(3), &only_at_3),
        );
        let probed = probed_groups(&sends);
        assert_eq!(probed, only_at_3.iter().cloned().collect(), "{cache:?}");

        // The next sweep: replica 2 for its next page, replica 4 (no answer) again,
        // replica 3 (listed to its end) no more.
        let sends = step(&mut replica, &store, at(2000), ReplicaInput::Tick);
        let asked_again = listings(&sends);
        let again: Vec<(u16, Option<EgId>)> = (asked_again.iter())
            .map(|(r, _, after)| (r.0, after.clone()))
            .collect();
        assert_eq!(again, [(2, Some(new[215].clone())), (4, None)], "{cache:?}");
        // A late answer to a listing given up on is not taken.
        let late = named("late", 0..3);
        let sends = step(
            &mut replica,
            &store,
            at(2005),
            groups_from(4, id_of(4), &late),
        );
        assert!(probes(&sends).is_empty(), "{cache:?}: {sends:?}");
        let id_of = |r: u16| asked_again.iter().find(|a| a.0.0 == r).unwrap().1;
        let sends = step(
            &mut replica,
            &store,
            at(2010),
            groups_from(2, id_of(2), &new[216..]),
        );
        let probed = probed_groups(&sends);
        assert_eq!(probed, new[216..].iter().cloned().collect(), "{cache:?}");
        let sends = step(
            &mut replica,
            &store,
            at(2020),
            groups_from(4, id_of(4), &[]),
        );
        assert!(probes(&sends).is_empty(), "{cache:?}");
        // Every registry listed to its end: the pass is over.
        for sweep in 3..6 {
            let sends = step(&mut replica, &store, at(sweep * 1000), ReplicaInput::Tick);
            assert!(listings(&sends).is_empty(), "{cache:?}: sweep {sweep}");
        }
    }
}

#[test]
fn a_replica_lists_its_registry_to_a_peer_a_page_at_a_time() {
    let store = MemoryStore::new();
    let mut replica = replica_caching(Some(8));
    let groups = named("held", 0..5);
    for eg in &groups {
        write_positions(&mut replica, &store, eg, 1);
    }
    let mut ask = |id, after: Option<&EgId>, limit| {
        let input = ReplicaInput::Message {
            from: NodeId::Replica(ReplicaId(2)),
            message: Message::ReplicaRequest(ReplicaRequest::ListGroups {
                id,
                after: after.cloned(),
                limit,
                server: None,
            }),
        };
        let sends = step(&mut replica, &store, at(0), input);
        let answers: Vec<(NodeId, u64, Vec<EgId>)> = sends
            .into_iter()
            .filter_map(|(to, m)| match m {
                Message::ReplicaReply(ReplicaReply::Groups { id, groups }) => {
                    Some((to, id, groups))
                }
                _ => None,
            })
            .collect();
        assert_eq!(answers.len(), 1, "one answer");
        let (to, answered, listed) = answers.into_iter().next().unwrap();
        assert_eq!((to, answered), (NodeId::Replica(ReplicaId(2)), id));
        listed
    };
    assert_eq!(ask(1, None, 3), groups[..3]);
    assert_eq!(ask(2, Some(&groups[2]), 3), groups[3..]);
    assert!(ask(3, Some(&groups[4]), 3).is_empty());
    // However many are asked for, at most LIST_GROUPS_MAX (all 5 here).
    assert_eq!(ask(4, None, usize::MAX), groups);
}

/// Steps the replica; the sends and the snapshot installs that did not happen.
fn step_reporting(
    replica: &mut Replica,
    store: &MemoryStore,
    now: Time,
    input: ReplicaInput,
) -> (Vec<(NodeId, Message)>, Vec<FailedInstall>) {
    let mut batch = Batch::new();
    replica.step_into(now, input, store, &mut batch).unwrap();
    let failed = batch.take_failed_installs();
    assert_eq!(batch.counts().failed_installs, failed.len() as u64);
    (batch.release(store).unwrap().sends, failed)
}

#[test]
fn a_snapshot_install_that_does_not_happen_is_reported() {
    // Two groups a peer lists and this replica never had, truncated everywhere else
    // through 40: each probe asks for a snapshot. One source refuses, one never answers.
    let store = MemoryStore::new();
    let mut replica = replica_caching(Some(8));
    let (sends, _) = step_reporting(&mut replica, &store, at(1000), ReplicaInput::Tick);
    let (_, id, _) = listings(&sends)[0].clone();
    let groups = named("behind", 0..2);
    let (sends, _) = step_reporting(&mut replica, &store, at(1001), groups_from(2, id, &groups));
    let truncated_40 = LogState {
        highest: Position(50),
        visible: Position(50),
        applied: Position(50),
        truncated: Position(40),
        next_leader: Some(ReplicaId(2)),
    };
    let mut snapshots = Vec::new();
    for (r, id, _) in probes(&sends) {
        let reply = ReplicaInput::Message {
            from: NodeId::Replica(r),
            message: Message::ReplicaReply(ReplicaReply::LogState {
                id,
                state: truncated_40,
            }),
        };
        let (sends, failed) = step_reporting(&mut replica, &store, at(1002), reply);
        assert!(failed.is_empty());
        snapshots.extend(sends.into_iter().filter_map(|(to, m)| match (to, m) {
            (NodeId::Replica(r), Message::ReplicaRequest(ReplicaRequest::Snapshot { id, eg })) => {
                Some((r, id, eg))
            }
            _ => None,
        }));
    }
    let asked: Vec<EgId> = snapshots.iter().map(|(_, _, eg)| eg.clone()).collect();
    assert_eq!(asked, groups, "a snapshot asked for each group");
    // Both groups are behind by what their sources applied, until they apply it.
    let behind_50_each = ReplicaLag {
        groups: 2,
        positions: 100,
    };
    assert_eq!(
        replica.lag(),
        behind_50_each,
        "while the installs are asked"
    );
    // The first group's source refuses.
    let (source, id, _) = snapshots[0].clone();
    let error = megastore_paxos::ReplicaError::NotApplied {
        applied: Position(3),
    };
    let refusal = ReplicaInput::Message {
        from: NodeId::Replica(source),
        message: Message::ReplicaReply(ReplicaReply::Error {
            id,
            error: error.clone(),
        }),
    };
    let (_, failed) = step_reporting(&mut replica, &store, at(1003), refusal);
    assert_eq!(
        failed,
        [FailedInstall {
            eg: groups[0].clone(),
            source,
            why: InstallFailure::Refused(error),
        }]
    );
    // The second's never answers: reported once the RPC timeout (100 ms) passed.
    let (_, failed) = step_reporting(&mut replica, &store, at(1050), ReplicaInput::Tick);
    assert!(failed.is_empty(), "{failed:?}");
    let (_, failed) = step_reporting(&mut replica, &store, at(1150), ReplicaInput::Tick);
    assert_eq!(
        failed,
        [FailedInstall {
            eg: groups[1].clone(),
            source: snapshots[1].0,
            why: InstallFailure::NoAnswer,
        }]
    );
    // The installs that did not happen leave the groups behind as far: the lag (and
    // `megastore status`) still shows them.
    assert_eq!(replica.lag(), behind_50_each, "after the installs failed");
}
