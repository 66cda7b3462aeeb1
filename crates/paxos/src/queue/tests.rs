//! The queue keys, and a delivery's steps against answers given by hand.

use megastore_rowstore::{Cell, Row};
use megastore_types::{ClientId, EgId, Position, ReplicaId, TxnId};

use super::*;
use crate::proposer::read::ReadPath;

fn g(name: &str) -> EgId {
    EgId(name.as_bytes().to_vec())
}

/// The row a write leaves after applying at `position` (sets only).
fn applied(write: &RowWrite, position: u64) -> Row {
    write.as_row(position)
}

fn read(position: u64, rows: Vec<Row>) -> ReadResult {
    ReadResult {
        position: Some(Position(position)),
        rows,
        replica: ReplicaId(1),
        next_leader: None,
        path: ReadPath::Majority,
        prepared: Vec::new(),
    }
}

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(9),
        seq,
    }
}

#[test]
fn keys_name_their_parts_and_sort_in_delivery_order() {
    let (a, b) = (g("a"), g("b"));
    let place = |p: u64, i: u32| Place {
        position: Position(p),
        index: i,
    };
    let row = inbox_row(&b, "mail", &a, place(7, 1));
    assert_eq!(
        parse_inbox_row(&b, &row),
        Some(("mail".into(), a.clone(), place(7, 1)))
    );
    assert!(inbox_range(&b, "mail").contains(&row));
    assert!(
        !inbox_range(&b, "mai").contains(&row),
        "a queue's name is delimited"
    );
    assert!(inbox_row(&b, "mail", &a, place(7, 2)) > row);
    assert!(inbox_row(&b, "mail", &a, place(8, 0)) > inbox_row(&b, "mail", &a, place(7, 9)));
    let sent = send_write(&a, txn(3), 2, &b, "mail", b"hi", 7);
    assert!(
        outgoing(&a, &applied(&sent, 41)).is_none(),
        "not stamped: not a message yet"
    );
    let stamped_row = applied(&stamped(&a, &sent, Position(41), 0), 41);
    let message = outgoing(&a, &stamped_row).expect("an outbox row");
    assert_eq!(
        (message.to, message.queue.as_str(), &message.body[..]),
        (b.clone(), "mail", &b"hi"[..])
    );
    assert_eq!(message.place, place(41, 2), "the position that chose it");
    assert!(outbox_range(&a).contains(&sent.row) && !outbox_range(&b).contains(&sent.row));
    // A row no sender of this protocol wrote (a queue name too long for the inbox key)
    // is not a message: a deliverer skips it rather than fail.
    let huge = "q".repeat(70_000);
    let odd = send_write(&a, txn(4), 0, &b, &huge, b"x", 7);
    assert!(outgoing(&a, &applied(&stamped(&a, &odd, Position(5), 0), 5)).is_none());
}

/// Two transactions combined into one entry both send their message 0: each gets its
/// own place, the later transaction's after the earlier one's.
#[test]
fn combined_transactions_messages_get_distinct_places_in_serial_order() {
    let (a, b) = (g("a"), g("b"));
    let entry = LogEntry::combining(
        [
            (
                txn(1),
                vec![
                    send_write(&a, txn(1), 0, &b, "q", b"one", 7),
                    send_write(&a, txn(1), 1, &b, "q", b"two", 7),
                ],
            ),
            (
                txn(2),
                vec![send_write(&a, txn(2), 0, &b, "q", b"three", 7)],
            ),
        ],
        None,
    );
    let place = |p: u64, index: u32| Place {
        position: Position(p),
        index,
    };
    let places: Vec<(Place, Vec<u8>)> = stamped_entry(&a, &entry, Position(9))
        .iter()
        .filter_map(|w| outgoing(&a, &applied(w, 9)))
        .map(|m| (m.place, m.body))
        .collect();
    assert_eq!(
        places,
        vec![
            (place(9, 0), b"one".to_vec()),
            (place(9, 1), b"two".to_vec()),
            (place(9, INDEXES_PER_TRANSACTION), b"three".to_vec()),
        ]
    );
}

/// A delivery reads the outbox, then per receiver its mark, commits what is after the
/// mark with the new mark, and trims what every handled receiver holds.
#[test]
fn a_delivery_commits_only_what_the_receivers_mark_lacks_then_trims() {
    let (a, b, c) = (g("a"), g("b"), g("c"));
    let sends = [
        send_write(&a, txn(1), 0, &b, "q", b"one", 7),
        send_write(&a, txn(1), 1, &c, "q", b"two", 7),
        send_write(&a, txn(2), 0, &b, "q", b"three", 7),
    ];
    let at = |write: &RowWrite, p: u64| applied(&stamped(&a, write, Position(p), 0), p);
    let outbox = vec![at(&sends[0], 5), at(&sends[1], 5), at(&sends[2], 6)];
    let (mut deliver, first) = Deliver::start(a.clone(), DELIVERY_BATCH, ProtocolBugs::default());
    assert!(matches!(first, Step::Read { ref eg, .. } if *eg == a));
    // To b first (receivers in key order): b already has the first message.
    let Some(Step::Read { eg, query, .. }) = deliver.on_read(Ok(read(6, outbox))) else {
        panic!("b's mark is read next");
    };
    assert_eq!(
        (eg.clone(), query),
        (b.clone(), DataQuery::Rows(vec![mark_row(&b, &a)]))
    );
    let b_mark = Row {
        key: mark_row(&b, &a),
        cells: [(
            THROUGH.to_vec(),
            Cell {
                timestamp: 3,
                value: Place {
                    position: Position(5),
                    index: 0,
                }
                .encode()
                .to_vec(),
            },
        )]
        .into(),
    };
    let Some(Step::Commit {
        eg, writes, reads, ..
    }) = deliver.on_read(Ok(read(3, vec![b_mark])))
    else {
        panic!("b's new messages are committed");
    };
    assert_eq!(eg, b);
    assert_eq!(
        reads,
        ReadSet::from(std::collections::BTreeSet::from([mark_row(&b, &a)]))
    );
    let inboxed: Vec<_> = writes
        .iter()
        .filter_map(|w| parse_inbox_row(&b, &w.row))
        .collect();
    assert_eq!(
        inboxed,
        vec![(
            "q".into(),
            a.clone(),
            Place {
                position: Position(6),
                index: 0
            }
        )]
    );
    let committed = CommitResult::Committed {
        position: Position(4),
        fast: true,
    };
    // Then c, which has nothing yet, but loses its commit to another deliverer.
    let Some(Step::Read { eg, .. }) = deliver.on_commit(&committed) else {
        panic!("c's mark next");
    };
    assert_eq!(eg, c);
    let Some(Step::Commit { .. }) = deliver.on_read(Ok(read(1, Vec::new()))) else {
        panic!("c's message is committed");
    };
    let Some(Step::Commit {
        eg, writes, reads, ..
    }) = deliver.on_commit(&CommitResult::Conflict { keys: vec![] })
    else {
        panic!("the outbox is trimmed");
    };
    assert_eq!((eg, reads), (a.clone(), ReadSet::default()));
    let trimmed: Vec<_> = writes.iter().map(|w| w.row.clone()).collect();
    assert_eq!(
        trimmed,
        vec![sends[0].row.clone(), sends[2].row.clone()],
        "b's only"
    );
    assert!(deliver.result().is_none());
    assert_eq!(deliver.on_commit(&committed).map(|_| ()), None);
    let done = deliver.result().unwrap().unwrap();
    assert_eq!(
        (done.delivered, done.already, done.skipped),
        (1, 1, vec![c])
    );
}

#[test]
fn consuming_declares_the_consumed_rows_read() {
    let message = Incoming {
        row: b"r".to_vec(),
        queue: "q".into(),
        sender: g("a"),
        place: Place {
            position: Position(1),
            index: 0,
        },
        body: b"x".to_vec(),
        sent_ms: 7,
    };
    let (writes, reads) = consume(std::slice::from_ref(&message), &ProtocolBugs::default());
    assert_eq!(writes.len(), 1);
    assert_eq!(reads, vec![b"r".to_vec()]);
}

#[test]
fn a_backlog_counts_each_queue_and_the_outbox_with_its_oldest_message() {
    let (a, b) = (g("a"), g("b"));
    let sent = |seq: u64, ms: u64| {
        applied(
            &stamped(
                &a,
                &send_write(&a, txn(seq), 0, &b, "q", b"x", ms),
                Position(seq),
                0,
            ),
            seq,
        )
    };
    let inbox = |queue: &str, p: u64, ms: u64| Row {
        key: inbox_row(
            &a,
            queue,
            &b,
            Place {
                position: Position(p),
                index: 0,
            },
        ),
        cells: [
            (
                BODY.to_vec(),
                Cell {
                    timestamp: 1,
                    value: b"y".to_vec(),
                },
            ),
            (
                SENT_MS.to_vec(),
                Cell {
                    timestamp: 1,
                    value: ms.to_be_bytes().to_vec(),
                },
            ),
        ]
        .into(),
    };
    let rows = vec![
        sent(1, 50),
        sent(2, 40),
        inbox("mail", 3, 30),
        inbox("mail", 4, 20),
        inbox("jobs", 1, 10),
    ];
    let backlog = backlog(&a, &rows);
    assert_eq!(
        backlog.outbox,
        Depth {
            messages: 2,
            oldest_sent_ms: Some(40)
        }
    );
    assert_eq!(
        backlog.inbox["mail"],
        Depth {
            messages: 2,
            oldest_sent_ms: Some(20)
        }
    );
    assert_eq!(
        backlog.inbox["jobs"],
        Depth {
            messages: 1,
            oldest_sent_ms: Some(10)
        }
    );
    assert!(rows.iter().all(|r| queue_range(&a).contains(&r.key)));
}

/// A delivery takes the first messages in place order, whatever order their outbox
/// rows sort in (by transaction): a batch that took a later message first would move
/// the mark past an earlier one, which would then pass for delivered.
#[test]
fn a_batch_is_the_first_messages_in_place_order() {
    let (a, b) = (g("a"), g("b"));
    // Transaction seq 1000 + i is chosen at position 1000 − i: rows sort against place.
    let outbox: Vec<Row> = (0..DELIVERY_BATCH as u64 + 5)
        .map(|i| {
            let write = send_write(&a, txn(1_000 + i), 0, &b, "q", b"m", 7);
            applied(&stamped(&a, &write, Position(1_000 - i), 0), 1_000 - i)
        })
        .collect();
    let (mut deliver, first) = Deliver::start(a.clone(), DELIVERY_BATCH, ProtocolBugs::default());
    assert!(
        matches!(
            first,
            Step::Read {
                query: DataQuery::Scan { limit: None, .. },
                ..
            }
        ),
        "the whole outbox is read: {first:?}"
    );
    let Some(Step::Read { .. }) = deliver.on_read(Ok(read(1_000, outbox))) else {
        panic!("b's mark next");
    };
    let Some(Step::Commit { writes, .. }) = deliver.on_read(Ok(read(1, Vec::new()))) else {
        panic!("b's messages are committed");
    };
    let places: Vec<u64> = writes
        .iter()
        .filter_map(|w| parse_inbox_row(&b, &w.row))
        .map(|(_, _, place)| place.position.0)
        .collect();
    let lowest: Vec<u64> = (1_000 - (DELIVERY_BATCH as u64 + 4)..)
        .take(DELIVERY_BATCH)
        .collect();
    assert_eq!(places, lowest, "the lowest places, in order");
    assert!(deliver.done.more, "more wait");
}
