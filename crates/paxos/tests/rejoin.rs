//! A replica that lost its store: the rejoin rule (it votes only above what a majority
//! of the other voters held when it came back, and grants ballot 0 only one position
//! later) and snapshot install (docs/protocol.md).

mod support;

use ReplicaKind::Full;
use megastore_paxos::cells::StoredGroup;
use megastore_paxos::messages::{AcceptResult, GrantRefusal, ReplicaError};
use megastore_paxos::replica::Proposal;
use megastore_paxos::{
    CellWrite, DataQuery, GroupLog, GroupSnapshot, HISTORY_KEPT, LogEntry, ProtocolBugs, ReadAt,
    Rejoin, ReplicaOutput, ReplicaReply, ReplicaRequest, RowWrite, data_range, group_range,
    root_row,
};
use megastore_rowstore::{
    Durability, KeyRange, LATEST, MemoryStore, RowRead, RowStore, ScanOptions,
};
use megastore_types::{Ballot, Position, ReplicaId, ReplicaKind};
use support::*;

/// Carries out a group's outputs against `store` (persists and installs synced).
fn carry_out(store: &MemoryStore, outputs: Vec<ReplicaOutput>) {
    for output in outputs {
        match output {
            ReplicaOutput::Persist { mutation } => {
                store
                    .mutate_row(&mutation, None, Durability::Synced)
                    .unwrap();
            }
            ReplicaOutput::Apply { eg, rows, .. } | ReplicaOutput::Install { eg, rows, .. } => {
                store
                    .mutate_rows(&group_range(&eg), &rows, Durability::Synced)
                    .unwrap();
            }
            other => panic!("unexpected output {other:?}"),
        }
    }
}

fn reload(store: &MemoryStore, rejoining: bool) -> GroupLog {
    let row = store
        .read_row(&root_row(&eg()), &KeyRange::all(), LATEST)
        .unwrap();
    GroupLog::load(
        eg(),
        StoredGroup::from_row(row.as_ref()).unwrap(),
        Vec::new(),
        &ProtocolBugs::NONE,
        rejoining,
    )
}

/// A second data row of the group.
fn other_row() -> Vec<u8> {
    [eg().0, b"\x01j".to_vec()].concat()
}

/// Transaction 1: k = "one" and j = "x" (next leader 2).
fn first_write_of_k_and_j() -> LogEntry {
    let mut first = write(1, Some(2), "one");
    first.writes.push(RowWrite {
        row: other_row(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    });
    first
}

fn read(node: &mut Node, at: ReadAt) -> ReplicaReply {
    node.ask(ReplicaRequest::Read {
        id: 7,
        eg: eg(),
        at,
        query: DataQuery::Scan {
            range: megastore_paxos::data_range(&eg()),
            limit: None,
            reverse: false,
        },
    })
}

fn rejoining_error(reply: ReplicaReply) {
    assert!(
        matches!(
            reply,
            ReplicaReply::Error {
                error: ReplicaError::Rejoining,
                ..
            }
        ),
        "{reply:?}"
    );
}

#[test]
fn an_uncleared_replica_neither_votes_nor_reports_its_log_but_learns_and_serves() {
    let mut node = Node::rejoining(1);
    rejoining_error(node.ask(ReplicaRequest::Prepare {
        id: 1,
        eg: eg(),
        position: Position(1),
        ballot: ballot(1),
        voters_at: megastore_placement::Version(0),
    }));
    rejoining_error(node.ask(accept(1, ballot(1), write(1, Some(1), "one"), false)));
    rejoining_error(node.ask(accept(1, Ballot::ZERO, write(1, Some(1), "one"), true)));
    // A majority read must not count it: it reports no log state.
    rejoining_error(node.ask(ReplicaRequest::LogState { id: 3, eg: eg() }));
    // Chosen values are learned and applied as usual.
    assert!(matches!(
        node.ask(mark(1, ballot(1), write(1, Some(1), "one"))),
        ReplicaReply::MarkedVisible {
            applied: Position(1),
            ..
        }
    ));
    match read(&mut node, ReadAt::Position(Position(1))) {
        ReplicaReply::Data { rows, .. } => assert_eq!(rows[0].value(b"v"), Some(&b"one"[..])),
        other => panic!("{other:?}"),
    }
    // Still uncleared after a restart: the rule does not depend on memory.
    node.restart();
    rejoining_error(node.ask(accept(2, ballot(1), write(2, None, "two"), false)));
}

#[test]
fn a_cleared_group_votes_above_its_floor_and_grants_ballot_zero_one_position_later() {
    let bugs = ProtocolBugs::NONE;
    let me = ReplicaId(1);
    let store = MemoryStore::new();
    let mut group = reload(&store, true);
    assert_eq!(group.rejoin(), Rejoin::Uncleared);
    assert!(!group.votes_at(Position(1)));
    let mut out = Vec::new();
    group.clear(Position(3), &mut out);
    carry_out(&store, out);
    // The floor is durable.
    let mut group = reload(&store, true);
    assert_eq!(group.rejoin(), Rejoin::Cleared { floor: Position(3) });
    assert!(!group.votes_at(Position(3)));
    assert!(group.votes_at(Position(4)));
    assert_eq!(
        group.log_state().highest,
        Position(3),
        "a majority read counting it still sees the floor"
    );
    let mut out = Vec::new();
    let kind = ReplicaKind::Full;
    for p in 1..=3 {
        group
            .mark_visible(
                kind,
                &bugs,
                Position(p),
                ballot(1),
                write(p, Some(1), "x"),
                &mut out,
            )
            .unwrap();
    }
    // The entry at 3 names this replica as the leader of 4, but it may have granted 4
    // before it lost its store, before anyone else recorded anything at 4.
    let proposal = |p: u64, b: Ballot, txn: u64, grant: bool| Proposal {
        position: Position(p),
        ballot: b,
        entry: write(txn, Some(1), "y"),
        grant,
    };
    assert_eq!(
        group.accept(me, &bugs, proposal(4, Ballot::ZERO, 4, true), &mut out),
        AcceptResult::GrantRefused(GrantRefusal::NotLeader)
    );
    assert_eq!(
        group.accept(me, &bugs, proposal(4, ballot(2), 4, false), &mut out),
        AcceptResult::Accepted
    );
    group
        .mark_visible(
            kind,
            &bugs,
            Position(4),
            ballot(2),
            write(4, Some(1), "y"),
            &mut out,
        )
        .unwrap();
    assert_eq!(
        group.accept(me, &bugs, proposal(5, Ballot::ZERO, 5, true), &mut out),
        AcceptResult::Accepted
    );
    // A never-wiped replica's promises and grants count towards what it reports.
    let mut member = reload(&MemoryStore::new(), false);
    assert!(member.votes_at(Position(1)));
    member.prepare(Position(9), ballot(1), &mut Vec::new());
    assert_eq!(member.log_state().highest, Position(9));
}

#[test]
fn a_snapshot_installs_over_a_wiped_replicas_data_which_then_refuses_reads_below_it() {
    // Position 1 writes k and j; position 2 rewrites k and deletes j.
    let first = first_write_of_k_and_j();
    let mut second = write(2, Some(2), "two");
    second.writes.push(RowWrite {
        row: other_row(),
        cells: vec![CellWrite::Delete {
            column: b"v".to_vec(),
        }],
    });
    let mut source = Node::new(2);
    source.ask(mark(1, ballot(1), first.clone()));
    source.ask(mark(2, ballot(1), second));
    let ReplicaReply::Snapshot { at, slot, rows, .. } =
        source.ask(ReplicaRequest::Snapshot { id: 5, eg: eg() })
    else {
        panic!("no snapshot");
    };
    assert_eq!(at, Position(2));
    assert!(slot.visible);

    // The wiped replica learned position 1 again (a late mark) before the install.
    let store = MemoryStore::new();
    let mut group = reload(&store, true);
    let mut out = Vec::new();
    let kind = ReplicaKind::Full;
    group
        .mark_visible(
            kind,
            &ProtocolBugs::NONE,
            Position(1),
            ballot(1),
            first,
            &mut out,
        )
        .unwrap();
    assert_eq!(group.applied(), Position(1));
    group.clear(Position(2), &mut out);
    // A later position already learned is applied right after the install.
    group
        .mark_visible(
            ReplicaKind::Full,
            &ProtocolBugs::NONE,
            Position(3),
            ballot(1),
            write(3, Some(2), "three"),
            &mut out,
        )
        .unwrap();
    let none = &ProtocolBugs::NONE;
    let snapshot = GroupSnapshot { at, slot, rows };
    assert!(group.install(Full, snapshot.clone(), None, none, &mut out));
    assert_eq!(
        (group.visible(), group.applied(), group.truncated()),
        (Position(3), Position(3), Position(1))
    );
    assert!(
        !group.install(Full, snapshot, None, none, &mut Vec::new()),
        "never over data it no longer has the log of, unless its stored data is listed"
    );
    carry_out(&store, out);

    let mut node = Node::rejoining(1);
    node.store = store;
    // Only k: j, deleted at 2, is gone although this replica applied it at 1.
    match read(&mut node, ReadAt::Position(Position(2))) {
        ReplicaReply::Data { rows, .. } => {
            assert_eq!(rows.len(), 1, "{rows:?}");
            assert_eq!(rows[0].value(b"v"), Some(&b"two"[..]));
        }
        other => panic!("{other:?}"),
    }
    match read(&mut node, ReadAt::Applied) {
        ReplicaReply::Data {
            at: Some(Position(3)),
            rows,
            ..
        } => {
            assert_eq!(rows.len(), 1, "{rows:?}");
            assert_eq!(rows[0].value(b"v"), Some(&b"three"[..]));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        read(&mut node, ReadAt::Position(Position(1))),
        ReplicaReply::Error {
            id: 7,
            error: ReplicaError::HistoryFrom {
                installed: Position(2)
            }
        }
    );
    // Witnesses keep no data to snapshot; an empty group has nothing applied.
    let mut witness = Node::new(3);
    witness.ask(mark(1, ballot(1), write(1, None, "one")));
    for node in [&mut witness, &mut Node::new(2)] {
        assert_eq!(
            node.ask(ReplicaRequest::Snapshot { id: 5, eg: eg() }),
            ReplicaReply::Error {
                id: 5,
                error: ReplicaError::NoSnapshot
            }
        );
    }
}

/// Steps `replica` on `input` at `now` through the shared driver loop: its messages.
fn step(
    replica: &mut megastore_paxos::Replica,
    store: &MemoryStore,
    now: megastore_types::Time,
    input: megastore_paxos::ReplicaInput,
) -> Vec<(megastore_types::NodeId, megastore_paxos::Message)> {
    let mut batch = megastore_paxos::Batch::new();
    replica.step_into(now, input, store, &mut batch).unwrap();
    batch.release(store).unwrap().sends
}

/// The replica requests among `sends`, with their destinations.
fn requests(
    sends: &[(megastore_types::NodeId, megastore_paxos::Message)],
) -> Vec<(ReplicaId, ReplicaRequest)> {
    sends
        .iter()
        .filter_map(|(to, m)| match (to, m) {
            (megastore_types::NodeId::Replica(r), megastore_paxos::Message::ReplicaRequest(q)) => {
                Some((*r, q.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A wiped replica that learned a late position of a group every other replica has
/// truncated far below it: its snapshot request is lost, and its sweep's catch-up of
/// the abandoned position fails (everything below it is truncated everywhere). The next
/// sweep must probe the group again — which asks for a snapshot — rather than start the
/// same doomed catch-up (found by a 10,000-seed run: the catch-up restarted at every
/// sweep, so the group was never probed and the replica never caught up).
#[test]
fn a_group_whose_catch_up_failed_is_probed_again_for_a_snapshot() {
    use megastore_paxos::ReplicaInput;
    use megastore_types::{NodeId, Time};
    let at = |t: u64| Time::from_nanos(t * 1_000_000);
    // Cleared, with floor 40: the store a wiped replica has after clearing.
    let store = MemoryStore::new();
    let mut group = reload(&store, true);
    let mut out = Vec::new();
    group.clear(Position(40), &mut out);
    carry_out(&store, out);
    let mut replica = megastore_paxos::Replica::new(megastore_paxos::ReplicaConfig {
        id: ReplicaId(1),
        topology: topology(),
        bugs: ProtocolBugs::NONE,
        sweep: Some(support::sweep_of_replica_1(64)),
        rejoining: true,
        cache_groups: None,
    });
    // It accepts position 50 (above its floor) and never hears it is visible.
    let accept = ReplicaInput::Message {
        from: CLIENT,
        message: megastore_paxos::Message::ReplicaRequest(accept(
            50,
            ballot(1),
            write(50, Some(1), "late"),
            false,
        )),
    };
    step(&mut replica, &store, at(0), accept);
    let truncated_40 = megastore_paxos::LogState {
        highest: Position(50),
        visible: Position(50),
        applied: Position(50),
        truncated: Position(40),
        next_leader: Some(ReplicaId(2)),
    };
    // Sweep 1 probes the group; every other replica answers: truncated through 40.
    let sends = step(&mut replica, &store, at(1), ReplicaInput::Tick);
    let probes = requests(&sends);
    assert!(
        probes
            .iter()
            .any(|(_, q)| matches!(q, ReplicaRequest::LogState { .. })),
        "{probes:?}"
    );
    let mut snapshot_asked = false;
    for (r, q) in probes {
        let ReplicaRequest::LogState { id, .. } = q else {
            continue;
        };
        let reply = ReplicaReply::LogState {
            id,
            state: truncated_40,
        };
        let sends = step(
            &mut replica,
            &store,
            at(2),
            ReplicaInput::Message {
                from: NodeId::Replica(r),
                message: megastore_paxos::Message::ReplicaReply(reply),
            },
        );
        snapshot_asked |= requests(&sends)
            .iter()
            .any(|(_, q)| matches!(q, ReplicaRequest::Snapshot { .. }));
    }
    assert!(snapshot_asked, "the probe asks for a snapshot");
    // The snapshot never comes. The next sweeps: the abandoned position's catch-up runs
    // and fails (every position below it truncated at a majority)...
    let mut now = 1_000;
    let mut failed_catch_up = false;
    let mut probed_again = false;
    while now < 10_000 && !probed_again {
        now += 50;
        let sends = step(&mut replica, &store, at(now), ReplicaInput::Tick);
        for (r, q) in requests(&sends) {
            let reply = match q {
                ReplicaRequest::ReadLog { id, position, .. } if position <= Position(40) => {
                    failed_catch_up = true;
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::Truncated {
                            truncated: Position(40),
                            chosen: None,
                        },
                    }
                }
                ReplicaRequest::Prepare { id, .. } => ReplicaReply::Prepare {
                    id,
                    result: megastore_paxos::messages::PrepareResult::Truncated,
                },
                // ...and only then is the group probed again.
                ReplicaRequest::LogState { .. } if failed_catch_up => {
                    probed_again = true;
                    continue;
                }
                _ => continue,
            };
            step(
                &mut replica,
                &store,
                at(now),
                ReplicaInput::Message {
                    from: NodeId::Replica(r),
                    message: megastore_paxos::Message::ReplicaReply(reply),
                },
            );
        }
    }
    assert!(failed_catch_up, "the abandoned position's catch-up ran");
    assert!(
        probed_again,
        "the group was never probed again after its catch-up failed"
    );
}

/// A full replica whose log was truncated (through 2) lacks positions 3 and 4, which
/// the others truncated too (the stuck state of docs/protocol.md, "Still open" before
/// it closed): it installs the snapshot at 4 with the data its store lists, so j,
/// written at 1 and deleted at 3 — a write its log no longer names — is gone. What it
/// holds after, read at its applied position.
fn install_over_a_truncated_log(bugs: ProtocolBugs) -> Vec<megastore_rowstore::Row> {
    let first = first_write_of_k_and_j();
    let second = write(2, Some(2), "two");
    let mut third = write(3, Some(2), "three");
    third.writes = vec![RowWrite {
        row: other_row(),
        cells: vec![CellWrite::Delete {
            column: b"v".to_vec(),
        }],
    }];
    let fourth = write(4, Some(2), "four");
    let mut source = Node::new(2);
    for (p, entry) in [(1, &first), (2, &second), (3, &third), (4, &fourth)] {
        source.ask(mark(p, ballot(1), entry.clone()));
    }
    let ReplicaReply::Snapshot { at, slot, rows, .. } =
        source.ask(ReplicaRequest::Snapshot { id: 5, eg: eg() })
    else {
        panic!("no snapshot");
    };
    assert_eq!(at, Position(4));

    let store = MemoryStore::new();
    let mut group = reload(&store, false);
    let mut out = Vec::new();
    for (p, entry) in [(1, first), (2, second)] {
        group
            .mark_visible(Full, &bugs, Position(p), ballot(1), entry, &mut out)
            .unwrap();
    }
    group.truncate(Full, Position(2), HISTORY_KEPT, &bugs, &mut out);
    carry_out(&store, std::mem::take(&mut out));
    assert_eq!(
        (group.applied(), group.truncated()),
        (Position(2), Position(2))
    );
    assert!(group.install_needs_stored_data(Full));
    let snapshot = GroupSnapshot { at, slot, rows };
    assert!(
        !group.install(Full, snapshot.clone(), None, &bugs, &mut out),
        "not without the data its store holds"
    );
    let stored = store
        .scan(&data_range(&eg()), LATEST, &ScanOptions::default())
        .unwrap();
    assert!(group.install(Full, snapshot, Some(&stored), &bugs, &mut out));
    assert_eq!(
        (group.applied(), group.visible()),
        (Position(4), Position(4))
    );
    carry_out(&store, out);

    let mut node = Node::new(1);
    node.store = store;
    match read(&mut node, ReadAt::Applied) {
        ReplicaReply::Data {
            at: Some(Position(4)),
            rows,
            ..
        } => rows,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_installs_over_a_truncated_log_with_the_data_its_store_holds() {
    let rows = install_over_a_truncated_log(ProtocolBugs::NONE);
    assert_eq!(rows.len(), 1, "j was deleted at 3: {rows:?}");
    assert_eq!(rows[0].value(b"v"), Some(&b"four"[..]));
    let knob = ProtocolBugs {
        install_forgets_stored_columns: true,
        ..ProtocolBugs::NONE
    };
    let rows = install_over_a_truncated_log(knob);
    assert_eq!(
        rows.len(),
        2,
        "--bug install-forgets-stored-columns: j should survive the install: {rows:?}"
    );
}
