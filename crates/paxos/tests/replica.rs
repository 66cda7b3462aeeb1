//! The replica's acceptor rules (docs/protocol.md; paper §4.4.2, §4.6), request by request,
//! through a minimal driver over the in-memory row store.

mod support;

use megastore_paxos::LogEntry;
use megastore_paxos::cells::{StoredGroup, encode, grant_column};
use megastore_paxos::messages::DataQuery;
use megastore_paxos::messages::{AcceptResult, GrantRefusal, PrepareResult, ReplicaError};
use megastore_paxos::root_row;
use megastore_paxos::{CellWrite, ProtocolBugs, ReadAt, ReplicaReply, ReplicaRequest, RowWrite};
use megastore_rowstore::{Durability, KeyRange, LATEST, RowMutation, RowRead, RowStore};
use megastore_types::{Ballot, ClientId, Position, TxnId};
use support::*;

#[test]
fn ballot_zero_is_granted_once_by_the_position_leader_only_and_survives_a_restart() {
    let mut leader = Node::new(1);
    // No leader for position 1.
    let refused = accept_result(leader.ask(accept(1, Ballot::ZERO, write(1, None, "x"), true)));
    assert_eq!(refused, AcceptResult::GrantRefused(GrantRefusal::NotLeader));
    with_visible_first_entry(&mut leader);
    // Position 2: the visible entry at 1 names replica 1.
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, write(2, Some(1), "a"), true))),
        AcceptResult::Accepted
    );
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, write(2, Some(1), "a"), true))),
        AcceptResult::Accepted,
        "idempotent"
    );
    let second = accept_result(leader.ask(accept(2, Ballot::ZERO, write(3, Some(1), "b"), true)));
    assert_eq!(
        second,
        AcceptResult::GrantRefused(GrantRefusal::Taken(TxnId {
            client: ClientId(1),
            seq: 2
        }))
    );
    // The grant is durable as its slot alone: the root row holds no `grant:` cell.
    assert!(stored_grants(&leader).is_empty());
    leader.restart();
    let after_restart =
        accept_result(leader.ask(accept(2, Ballot::ZERO, write(3, Some(1), "b"), true)));
    assert_eq!(
        after_restart,
        AcceptResult::GrantRefused(GrantRefusal::Taken(TxnId {
            client: ClientId(1),
            seq: 2
        }))
    );
    // The granted transaction's request is judged again, and granted again.
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, write(2, Some(1), "a"), true))),
        AcceptResult::Accepted
    );
    // Replica 2 is not named: it never grants.
    let mut other = Node::new(2);
    with_visible_first_entry(&mut other);
    let not_leader =
        accept_result(other.ask(accept(2, Ballot::ZERO, write(4, Some(1), "c"), true)));
    assert_eq!(
        not_leader,
        AcceptResult::GrantRefused(GrantRefusal::NotLeader)
    );
}

/// The `grant:<p>` cells a root row holds from the layout before grants lived in memory
/// are deleted when the group is loaded, in the load's own write; the grant they
/// recorded still holds, through its slot.
#[test]
fn grant_cells_of_the_older_layout_are_deleted_at_load() {
    let mut leader = Node::new(1);
    with_visible_first_entry(&mut leader);
    let granted = write(2, Some(1), "a");
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, granted.clone(), true))),
        AcceptResult::Accepted
    );
    let txn = granted.txn.expect("a transaction's entry");
    let older = RowMutation::new(root_row(&eg())).set(grant_column(Position(2)), 0, encode(&txn));
    leader
        .store
        .mutate_row(&older, None, Durability::Synced)
        .unwrap();
    assert_eq!(stored_grants(&leader), [(Position(2), txn)]);
    leader.restart();
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, write(3, Some(1), "b"), true))),
        AcceptResult::GrantRefused(GrantRefusal::Taken(txn))
    );
    assert!(stored_grants(&leader).is_empty(), "deleted at load");
    assert_eq!(
        accept_result(leader.ask(accept(2, Ballot::ZERO, granted, true))),
        AcceptResult::Accepted
    );
}

/// The `grant:<p>` cells in `node`'s store.
fn stored_grants(node: &Node) -> Vec<(Position, TxnId)> {
    let row = node
        .store
        .read_row(&root_row(&eg()), &KeyRange::all(), LATEST)
        .unwrap();
    StoredGroup::from_row(row.as_ref()).unwrap().grants
}

/// A writer that finished position 1 itself asks for position 2's grant before its
/// visible mark of 1 arrived: saying at which ballot 1 was chosen, it is granted, and 1
/// is visible at the leader from then on. A ballot the leader does not hold 1 at is no
/// such proof.
#[test]
fn a_grant_request_carrying_the_previous_positions_ballot_marks_it_visible_first() {
    let mut node = Node::new(1);
    node.ask(accept(1, ballot(1), write(1, Some(1), "one"), false));
    let mut wrong = accept(2, Ballot::ZERO, write(2, Some(1), "a"), true);
    if let ReplicaRequest::Accept {
        previous_visible, ..
    } = &mut wrong
    {
        *previous_visible = Some(ballot(2));
    }
    assert_eq!(
        accept_result(node.ask(wrong)),
        AcceptResult::GrantRefused(GrantRefusal::NotLeader),
        "not the ballot 1 was accepted at here"
    );
    let mut right = accept(2, Ballot::ZERO, write(2, Some(1), "a"), true);
    if let ReplicaRequest::Accept {
        previous_visible, ..
    } = &mut right
    {
        *previous_visible = Some(ballot(1));
    }
    assert_eq!(accept_result(node.ask(right)), AcceptResult::Accepted);
    node.restart();
    let ReplicaReply::LogState { state, .. } =
        node.ask(ReplicaRequest::LogState { id: 9, eg: eg() })
    else {
        panic!("a log state")
    };
    assert_eq!(state.visible, Position(1), "1 is durably visible");
}

/// A combined entry whose joined transactions are out of place, repeated, or follow
/// no first one is refused, naming what is wrong; a well-formed one is accepted.
#[test]
fn a_combined_entry_is_checked_before_it_is_accepted() {
    let mut node = Node::new(1);
    let txn = |seq| TxnId {
        client: ClientId(1),
        seq,
    };
    let row = |name: &str| RowWrite {
        row: [eg().0.as_slice(), &[1], name.as_bytes()].concat(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    };
    let good = LogEntry::combining([(txn(1), vec![row("a")]), (txn(2), vec![row("b")])], None);
    let mut repeated = good.clone();
    repeated.joined[0].txn = txn(1);
    let mut outside = good.clone();
    outside.joined[0].first_write = 5;
    let mut no_first = good.clone();
    no_first.txn = None;
    for (bad, says) in [
        (repeated, "appears twice"),
        (outside, "outside"),
        (no_first, "no-op"),
    ] {
        match node.ask(accept(1, ballot(1), bad, false)) {
            ReplicaReply::Error {
                error: ReplicaError::BadEntry(why),
                ..
            } => assert!(why.contains(says), "{why}"),
            other => panic!("accepted a malformed combined entry: {other:?}"),
        }
    }
    assert_eq!(
        accept_result(node.ask(accept(1, ballot(1), good, false))),
        AcceptResult::Accepted
    );
}

#[test]
fn an_accepted_but_not_visible_entry_names_no_leader() {
    let mut node = Node::new(1);
    node.ask(accept(1, ballot(1), write(1, Some(1), "one"), false));
    let refused = accept_result(node.ask(accept(2, Ballot::ZERO, write(2, Some(1), "a"), true)));
    assert_eq!(refused, AcceptResult::GrantRefused(GrantRefusal::NotLeader));
    let mut buggy = Node::with_bugs(
        1,
        ProtocolBugs {
            leader_from_unchosen_entry: true,
            ..ProtocolBugs::NONE
        },
    );
    buggy.ask(accept(1, ballot(1), write(1, Some(1), "one"), false));
    assert_eq!(
        accept_result(buggy.ask(accept(2, Ballot::ZERO, write(2, Some(1), "a"), true))),
        AcceptResult::Accepted
    );
}

#[test]
fn promises_bar_lower_ballots_and_are_kept_across_restarts() {
    let mut node = Node::new(2);
    let prepare = |b| ReplicaRequest::Prepare {
        id: 3,
        eg: eg(),
        position: Position(5),
        ballot: b,
        voters_at: megastore_placement::Version(0),
    };
    assert_eq!(
        node.ask(prepare(ballot(2))),
        ReplicaReply::Prepare {
            id: 3,
            result: PrepareResult::Promised(None)
        }
    );
    node.restart();
    assert_eq!(
        accept_result(node.ask(accept(5, ballot(1), write(1, None, "old"), false))),
        AcceptResult::Rejected {
            promised: ballot(2)
        }
    );
    assert_eq!(
        node.ask(prepare(ballot(2))),
        ReplicaReply::Prepare {
            id: 3,
            result: PrepareResult::Rejected {
                promised: ballot(2)
            }
        }
    );
    assert_eq!(
        accept_result(node.ask(accept(5, ballot(2), write(1, None, "new"), false))),
        AcceptResult::Accepted
    );
    let promised = node.ask(prepare(ballot(3)));
    assert_eq!(
        promised,
        ReplicaReply::Prepare {
            id: 3,
            result: PrepareResult::Promised(Some((ballot(2), write(1, None, "new"))))
        }
    );
    // Ballot 0 never passes a promise.
    assert_eq!(
        accept_result(node.ask(accept(5, Ballot::ZERO, write(1, None, "z"), false))),
        AcceptResult::Rejected {
            promised: ballot(3)
        }
    );
    // The forget-promise bug: after a restart the promise is gone.
    let mut buggy = Node::with_bugs(
        2,
        ProtocolBugs {
            forget_promise_on_restart: true,
            ..ProtocolBugs::NONE
        },
    );
    buggy.ask(prepare(ballot(2)));
    buggy.restart();
    assert_eq!(
        accept_result(buggy.ask(accept(5, ballot(1), write(1, None, "old"), false))),
        AcceptResult::Accepted
    );
}

#[test]
fn visible_positions_apply_in_log_order_and_reads_wait_for_them() {
    let mut node = Node::new(1);
    let data = |n: &mut Node, at| {
        n.ask(ReplicaRequest::Read {
            id: 4,
            eg: eg(),
            at,
            query: DataQuery::Scan {
                range: megastore_paxos::data_range(&eg()),
                limit: None,
                reverse: false,
            },
        })
    };
    node.ask(mark(2, ballot(1), write(2, None, "two")));
    assert_eq!(
        data(&mut node, ReadAt::Position(Position(2))),
        ReplicaReply::Error {
            id: 4,
            error: ReplicaError::NotApplied {
                applied: Position(0)
            }
        }
    );
    node.ask(mark(1, ballot(1), write(1, None, "one")));
    match data(&mut node, ReadAt::Position(Position(2))) {
        ReplicaReply::Data {
            at: Some(Position(2)),
            rows,
            ..
        } => assert_eq!(rows[0].value(b"v"), Some(&b"two"[..])),
        other => panic!("{other:?}"),
    }
    match data(&mut node, ReadAt::Position(Position(1))) {
        ReplicaReply::Data { rows, .. } => assert_eq!(rows[0].value(b"v"), Some(&b"one"[..])),
        other => panic!("{other:?}"),
    }
    // A lost (unsynced) apply is redone when the group is loaded again.
    node.restart();
    match data(&mut node, ReadAt::Applied) {
        ReplicaReply::Data {
            at: Some(Position(2)),
            rows,
            ..
        } => assert_eq!(rows[0].value(b"v"), Some(&b"two"[..])),
        other => panic!("{other:?}"),
    }
}

/// A vouched read's one request: rows at the visible position when nothing is in
/// flight above it and it is applied, with the next position's leader; else the log
/// state to catch up from.
#[test]
fn a_settled_read_is_served_only_with_nothing_in_flight_above_the_visible_position() {
    let mut node = Node::new(1);
    let settled = |n: &mut Node| {
        n.ask(ReplicaRequest::Read {
            id: 5,
            eg: eg(),
            at: ReadAt::Settled,
            query: DataQuery::Scan {
                range: megastore_paxos::data_range(&eg()),
                limit: None,
                reverse: false,
            },
        })
    };
    node.ask(mark(1, ballot(1), write(1, Some(1), "one")));
    match settled(&mut node) {
        ReplicaReply::Data {
            at: Some(Position(1)),
            rows,
            next_leader,
            ..
        } => {
            assert_eq!(rows[0].value(b"v"), Some(&b"one"[..]));
            assert_eq!(next_leader, Some(megastore_types::ReplicaId(1)));
        }
        other => panic!("{other:?}"),
    }
    // Position 2 accepted here, its mark still on the way: reading at 1 could miss
    // an acknowledged write.
    node.ask(accept(2, ballot(1), write(2, None, "two"), false));
    match settled(&mut node) {
        ReplicaReply::LogState { id: 5, state } => {
            assert_eq!((state.highest, state.visible), (Position(2), Position(1)));
        }
        other => panic!("{other:?}"),
    }
    let mut buggy = Node::with_bugs(
        1,
        ProtocolBugs {
            settled_read_ignores_in_flight: true,
            ..ProtocolBugs::NONE
        },
    );
    buggy.ask(mark(1, ballot(1), write(1, Some(1), "one")));
    buggy.ask(accept(2, ballot(1), write(2, None, "two"), false));
    assert!(matches!(
        settled(&mut buggy),
        ReplicaReply::Data {
            at: Some(Position(1)),
            ..
        }
    ));
    node.ask(mark(2, ballot(1), write(2, None, "two")));
    match settled(&mut node) {
        ReplicaReply::Data {
            at: Some(Position(2)),
            rows,
            next_leader: None,
            ..
        } => assert_eq!(rows[0].value(b"v"), Some(&b"two"[..])),
        other => panic!("{other:?}"),
    }
}

#[test]
fn witnesses_vote_but_serve_no_reads_and_read_only_replicas_never_vote() {
    let mut witness = Node::new(3);
    assert_eq!(
        accept_result(witness.ask(accept(1, ballot(1), write(1, None, "a"), false))),
        AcceptResult::Accepted
    );
    let read = ReplicaRequest::Read {
        id: 5,
        eg: eg(),
        at: ReadAt::Latest,
        query: DataQuery::Rows(vec![]),
    };
    assert_eq!(
        witness.ask(read.clone()),
        ReplicaReply::Error {
            id: 5,
            error: ReplicaError::NotServing
        }
    );
    let mut read_only = Node::new(4);
    assert_eq!(
        read_only.ask(accept(1, ballot(1), write(1, None, "a"), false)),
        ReplicaReply::Error {
            id: 1,
            error: ReplicaError::NotVoter
        }
    );
    assert!(matches!(
        read_only.ask(mark(1, ballot(1), write(1, None, "a"))),
        ReplicaReply::MarkedVisible {
            applied: Position(1),
            ..
        }
    ));
    assert!(matches!(read_only.ask(read), ReplicaReply::Data { .. }));
}

#[test]
fn entries_and_queries_outside_the_group_are_refused() {
    let mut node = Node::new(1);
    let mut outside = write(1, None, "x");
    outside.writes[0].row = b"other".to_vec();
    assert!(matches!(
        node.ask(accept(1, ballot(1), outside, false)),
        ReplicaReply::Error {
            error: ReplicaError::BadEntry(_),
            ..
        }
    ));
    let mut root = write(1, None, "x");
    root.writes[0].row = megastore_paxos::root_row(&eg());
    assert!(matches!(
        node.ask(accept(1, ballot(1), root, false)),
        ReplicaReply::Error {
            error: ReplicaError::BadEntry(_),
            ..
        }
    ));
    let read = ReplicaRequest::Read {
        id: 6,
        eg: eg(),
        at: ReadAt::Latest,
        query: DataQuery::Rows(vec![megastore_paxos::root_row(&eg())]),
    };
    assert!(matches!(
        node.ask(read),
        ReplicaReply::Error {
            error: ReplicaError::BadQuery(_),
            ..
        }
    ));
}

#[test]
fn accepts_over_a_size_limit_are_refused_naming_it_and_change_nothing() {
    use megastore_types::limits::{TRANSACTION_BYTES_MAX, VALUE_BYTES_MAX};
    let mut node = Node::new(1);
    let with_value = |len: usize| {
        let mut entry = write(1, None, "x");
        entry.writes[0].cells = vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: vec![7; len],
        }];
        entry
    };
    let refused = node.ask(accept(1, ballot(1), with_value(VALUE_BYTES_MAX + 1), false));
    assert!(
        matches!(&refused, ReplicaReply::Error { error: ReplicaError::BadEntry(why), .. }
            if why.contains("the limit is 100000")),
        "{refused:?}"
    );
    // Rows at the value limit, one past the transaction limit in all.
    let mut big = write(1, None, "x");
    big.writes = (0..=TRANSACTION_BYTES_MAX / VALUE_BYTES_MAX)
        .map(|i| RowWrite {
            row: [eg().0, format!("\x01r{i}").into_bytes()].concat(),
            cells: vec![CellWrite::Set {
                column: b"v".to_vec(),
                value: vec![1; VALUE_BYTES_MAX],
            }],
        })
        .collect();
    let refused = node.ask(accept(1, ballot(1), big, false));
    assert!(
        matches!(&refused, ReplicaReply::Error { error: ReplicaError::BadEntry(why), .. }
            if why.contains("the limit is 10000000")),
        "{refused:?}"
    );
    // Nothing was promised or accepted: the same position takes a value at the limit.
    assert_eq!(
        accept_result(node.ask(accept(1, ballot(1), with_value(VALUE_BYTES_MAX), false))),
        AcceptResult::Accepted
    );
}

/// Paper §4.4 (Paxos, phase 2): accepting at ballot b promises not to accept below b —
/// also when no prepare at b came first, and also after a restart. The accept's
/// persisted write carries the raised promise; without it (the knob
/// `accept-persists-no-promise`) a restarted acceptor takes a lower ballot's value over
/// one it accepted.
#[test]
fn an_accept_raises_the_promise_durably() {
    let run = |bugs: ProtocolBugs| {
        let mut node = Node::with_bugs(2, bugs);
        // Promised ballot 2 to one proposer; then accepts ballot 3 from another, whose
        // prepare went to other voters.
        node.ask(ReplicaRequest::Prepare {
            id: 3,
            eg: eg(),
            position: Position(5),
            ballot: ballot(2),
            voters_at: megastore_placement::Version(0),
        });
        assert_eq!(
            accept_result(node.ask(accept(5, ballot(3), write(2, None, "three"), false))),
            AcceptResult::Accepted
        );
        node.restart();
        // The first proposer's accept at ballot 2 arrives late.
        accept_result(node.ask(accept(5, ballot(2), write(1, None, "two"), false)))
    };
    assert_eq!(
        run(ProtocolBugs::NONE),
        AcceptResult::Rejected {
            promised: ballot(3)
        }
    );
    let broken = ProtocolBugs {
        accept_persists_no_promise: true,
        ..ProtocolBugs::NONE
    };
    assert_eq!(
        run(broken),
        AcceptResult::Accepted,
        "the knob breaks the rule"
    );
}

/// The double choice `accept-persists-no-promise` leads to, an interleaving random seeds
/// almost never produce (the simulator's acceptor-monotone checker catches the knob
/// earlier, from the promise a restart would reload): voters A, B and W. P2 prepares ballot 2 at A and W; P3
/// prepares ballot 3 at A and B, and its value is accepted at A and W — chosen. W
/// restarts; P2's accept at ballot 2 reaches it late; P4 then prepares at B and W and
/// must adopt P3's value. If W's accept had not persisted the raised promise, W would
/// take P2's value, P4 would adopt it, and a second value would be chosen.
#[test]
fn a_restarted_acceptor_never_lets_a_lower_ballot_unchoose_a_value() {
    let run = |bugs: ProtocolBugs| {
        let (mut a, mut b, mut w) = (Node::new(1), Node::new(2), Node::with_bugs(3, bugs));
        let prepare = |ballot| ReplicaRequest::Prepare {
            id: 3,
            eg: eg(),
            position: Position(5),
            ballot,
            voters_at: megastore_placement::Version(0),
        };
        let (v2, v3) = (write(2, None, "two"), write(3, None, "three"));
        for node in [&mut a, &mut w] {
            node.ask(prepare(ballot(2)));
        }
        for node in [&mut a, &mut b] {
            node.ask(prepare(ballot(3)));
        }
        for node in [&mut a, &mut w] {
            assert_eq!(
                accept_result(node.ask(accept(5, ballot(3), v3.clone(), false))),
                AcceptResult::Accepted
            );
        }
        // v3 is chosen: A and W accepted it at ballot 3.
        w.restart();
        w.ask(accept(5, ballot(2), v2.clone(), false));
        // P4 at B and W adopts the highest-ballot value it hears of.
        let mut adopted: Option<(Ballot, LogEntry)> = None;
        for node in [&mut b, &mut w] {
            match node.ask(prepare(ballot(4))) {
                ReplicaReply::Prepare {
                    result: PrepareResult::Promised(accepted),
                    ..
                } => {
                    if accepted.as_ref().map(|(b, _)| *b) > adopted.as_ref().map(|(b, _)| *b) {
                        adopted = accepted;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        adopted.map(|(_, entry)| entry)
    };
    assert_eq!(run(ProtocolBugs::NONE), Some(write(3, None, "three")));
    let broken = ProtocolBugs {
        accept_persists_no_promise: true,
        ..ProtocolBugs::NONE
    };
    assert_eq!(
        run(broken),
        Some(write(2, None, "two")),
        "with the knob a second value would be chosen"
    );
}

/// docs/protocol.md, "Global indexes": a full or read-only replica copies each mirror
/// write of an entry it applies to the global row it names, at the entry's position; a
/// witness copies nothing; a mirror row that names no global index row is refused.
#[test]
fn mirror_writes_are_copied_to_the_global_index_at_apply_and_checked_at_accept() {
    use megastore_paxos::global_mirror_range;
    use megastore_rowstore::{LATEST, RowRead};

    let mirror_row = |global: &[u8]| [global_mirror_range(&eg()).start, global.to_vec()].concat();
    let global_key = b"\xfdPhotosByTag\x01k".to_vec();
    let mut entry = write(1, None, "x");
    entry.writes.push(RowWrite {
        row: mirror_row(&global_key),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"entry".to_vec(),
        }],
    });
    for (id, copies) in [(1, true), (3, false), (4, true)] {
        let mut node = Node::new(id);
        assert!(matches!(
            node.ask(mark(1, ballot(1), entry.clone())),
            ReplicaReply::MarkedVisible { .. }
        ));
        let cell = node.store.read_cell(&global_key, b"v", LATEST).unwrap();
        match (copies, cell) {
            (true, Some(cell)) => {
                assert_eq!((cell.value.as_slice(), cell.timestamp), (&b"entry"[..], 1));
            }
            (false, None) => {}
            (copies, cell) => panic!("replica {id}: copies {copies}, found {cell:?}"),
        }
        // A global index scan: served by replicas with data, refused by witnesses and
        // outside the global index rows.
        let scan = |range: megastore_rowstore::KeyRange| ReplicaRequest::ScanGlobal {
            id: 9,
            range,
            limit: None,
            reverse: false,
            server: None,
            routed_by: None,
        };
        match node.ask(scan(megastore_paxos::global_index_range())) {
            ReplicaReply::Data { rows, at: None, .. } if copies => {
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].key, global_key);
            }
            ReplicaReply::Error {
                error: ReplicaError::NotServing,
                ..
            } if !copies => {}
            other => panic!("replica {id}: {other:?}"),
        }
        if copies {
            let everything = megastore_rowstore::KeyRange::all();
            assert!(matches!(
                node.ask(scan(everything)),
                ReplicaReply::Error {
                    error: ReplicaError::BadQuery(_),
                    ..
                }
            ));
        }
    }

    let mut node = Node::new(1);
    let mut stray = write(1, None, "x");
    stray.writes.push(RowWrite {
        row: mirror_row(b"\xfeanother group's row"),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    });
    let refused = node.ask(accept(1, ballot(1), stray, false));
    assert!(
        matches!(&refused, ReplicaReply::Error { error: ReplicaError::BadEntry(why), .. }
            if why.contains("0xFD")),
        "{refused:?}"
    );
}

/// A replica's lag is what it has seen but not applied: an accepted position not yet
/// visible counts until it is marked and applied; a witness is never behind.
#[test]
fn lag_counts_positions_seen_but_not_applied() {
    use megastore_paxos::ReplicaLag;
    let mut full = Node::new(1);
    assert_eq!(full.replica.lag(), ReplicaLag::default());
    assert_eq!(
        accept_result(full.ask(accept(1, ballot(1), write(1, None, "a"), false))),
        AcceptResult::Accepted
    );
    assert_eq!(
        full.replica.lag(),
        ReplicaLag {
            groups: 1,
            positions: 1
        }
    );
    assert!(matches!(
        full.ask(mark(1, ballot(1), write(1, None, "a"))),
        ReplicaReply::MarkedVisible { .. }
    ));
    assert_eq!(full.replica.lag(), ReplicaLag::default());

    let mut witness = Node::new(3);
    assert_eq!(
        accept_result(witness.ask(accept(1, ballot(1), write(1, None, "a"), false))),
        AcceptResult::Accepted
    );
    assert_eq!(witness.replica.lag(), ReplicaLag::default());
}

/// A watcher's long poll: held while the group's visible position is not past what the
/// watcher knows, answered with the log state as soon as a mark moves it (in the same
/// released batch as the mark's own reply), or when its wait ends.
#[test]
fn a_long_poll_is_answered_when_visible_moves_past_it_or_its_wait_ends() {
    use megastore_paxos::ReplicaInput;
    use megastore_types::{NodeId, Time};
    let mut node = Node::new(1);
    let request = |n: &mut Node, now: Time, past: u64| {
        n.step_at(
            now,
            ReplicaInput::Message {
                from: NodeId::Client(ClientId(7)),
                message: megastore_paxos::Message::ReplicaRequest(ReplicaRequest::AwaitVisible {
                    id: 9,
                    eg: eg(),
                    past: Position(past),
                    wait: std::time::Duration::from_millis(100),
                }),
            },
        )
    };
    let held_until = Time::ZERO + std::time::Duration::from_millis(100);
    let (replies, wake) = request(&mut node, Time::ZERO, 0);
    assert!(replies.is_empty(), "held: {replies:?}");
    assert_eq!(wake, Some(held_until));
    let (replies, _) = node.step_at(
        Time::ZERO,
        ReplicaInput::Message {
            from: NodeId::Client(ClientId(8)),
            message: megastore_paxos::Message::ReplicaRequest(mark(
                1,
                ballot(1),
                write(1, None, "one"),
            )),
        },
    );
    let visible: Vec<Position> = replies
        .iter()
        .filter_map(|r| match r {
            ReplicaReply::LogState { id: 9, state } => Some(state.visible),
            _ => None,
        })
        .collect();
    assert_eq!(visible, vec![Position(1)], "{replies:?}");
    // Already past: answered at once.
    let (replies, _) = request(&mut node, Time::ZERO, 0);
    assert_eq!(replies.len(), 1, "{replies:?}");
    // Not moving: answered when the wait ends, not before.
    let (replies, _) = request(&mut node, Time::ZERO, 1);
    assert!(replies.is_empty(), "{replies:?}");
    let almost = Time::ZERO + std::time::Duration::from_millis(99);
    assert!(node.step_at(almost, ReplicaInput::Tick).0.is_empty());
    match &node.step_at(held_until, ReplicaInput::Tick).0[..] {
        [ReplicaReply::LogState { id: 9, state }] => assert_eq!(state.visible, Position(1)),
        other => panic!("{other:?}"),
    }
}

/// A position leader that refused another client's grant request tells the grantee of
/// the next position that the group is contended, so that writer relays too instead of
/// winning every position by learning each first; a refused request of the grantee's
/// own client, or one long before, does not.
#[test]
fn a_grant_right_after_refusing_another_client_says_the_group_is_contended() {
    let mut leader = Node::new(1);
    with_visible_first_entry(&mut leader);
    let by = |client: u32, seq: u64| LogEntry {
        txn: Some(TxnId {
            client: ClientId(client),
            seq,
        }),
        ..write(seq, Some(1), &format!("{client}.{seq}"))
    };
    // Ask for `p`'s grant for `entry`, the position leader's answer; then for each of
    // `refused`, another transaction's request at `p`; then mark `entry` visible.
    let mut round = |p: u64, entry: LogEntry, refused: &[LogEntry]| {
        let result = accept_result(leader.ask(accept(p, Ballot::ZERO, entry.clone(), true)));
        for other in refused {
            assert!(matches!(
                accept_result(leader.ask(accept(p, Ballot::ZERO, other.clone(), true))),
                AcceptResult::GrantRefused(GrantRefusal::Taken(_))
            ));
        }
        assert!(result.accepted(), "{result:?}");
        leader.ask(mark(p, Ballot::ZERO, entry));
        result
    };
    assert_eq!(round(2, by(1, 2), &[]), AcceptResult::Accepted);
    // Refused at 3, but its own client's request: combined lanes of one client never duel.
    assert_eq!(round(3, by(1, 3), &[by(1, 4)]), AcceptResult::Accepted);
    // Another client refused at 4: the grantee of 5 hears of it.
    assert_eq!(round(4, by(1, 5), &[by(2, 1)]), AcceptResult::Accepted);
    assert_eq!(round(5, by(1, 6), &[]), AcceptResult::GrantedContended);
    assert!(AcceptResult::GrantedContended.accepted());
    // Two positions on, with no refusal since, it is quiet again.
    assert_eq!(round(6, by(1, 7), &[]), AcceptResult::Accepted);
}
