//! A replica that lost its store: the rejoin rule (it votes only above what a majority
//! of the other voters held when it came back, and grants ballot 0 only one position
//! later) and snapshot install (docs/protocol.md).

mod support;

use megastore_paxos::cells::StoredGroup;
use megastore_paxos::messages::{AcceptResult, GrantRefusal, ReplicaError};
use megastore_paxos::replica::Proposal;
use megastore_paxos::{
    CellWrite, DataQuery, GroupLog, ProtocolBugs, ReadAt, Rejoin, ReplicaOutput, ReplicaReply,
    ReplicaRequest, RowWrite, group_range, root_row,
};
use megastore_rowstore::{Durability, KeyRange, LATEST, MemoryStore, RowRead, RowStore};
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
        false,
        rejoining,
    )
}

/// A second data row of the group.
fn other_row() -> Vec<u8> {
    [eg().0, b"\x01j".to_vec()].concat()
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
    let mut first = write(1, Some(2), "one");
    first.writes.push(RowWrite {
        row: other_row(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    });
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
    assert!(group.install(ReplicaKind::Full, at, slot.clone(), rows.clone(), &mut out));
    assert_eq!(
        (group.visible(), group.applied(), group.truncated()),
        (Position(3), Position(3), Position(1))
    );
    assert!(
        !group.install(ReplicaKind::Full, at, slot, rows, &mut Vec::new()),
        "never over data it no longer has the log of"
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
