//! A visible mark at a replica that accepted the value (invariant
//! *visible-below-watermark*, docs/protocol.md "Groups in memory"): when the mark moves
//! the `visible` watermark over its position, it writes the watermark alone, not the
//! entry a second time; read back after a restart, the slot is still visible, so a
//! different value marked there is refused. A replica that applies records the new
//! watermark in its `applied` marker alone, synced with the mark (`cells::stored_visible`);
//! a witness writes `visible`.

mod support;

use megastore_paxos::cells::{APPLIED, StoredGroup, VISIBLE, log_column};
use megastore_paxos::{ReplicaError, ReplicaReply, root_row};
use megastore_rowstore::{KeyRange, LATEST, RowRead};
use megastore_types::Position;
use support::*;

/// The root row as stored, and the raw bytes of its `log:<p>` cell.
fn stored(node: &Node, p: u64) -> (StoredGroup, Option<Vec<u8>>) {
    let row = node
        .store
        .read_row(&root_row(&eg()), &KeyRange::all(), LATEST)
        .unwrap();
    let cell = row
        .as_ref()
        .and_then(|r| r.cells.get(&log_column(Position(p))))
        .map(|c| c.value.clone());
    (StoredGroup::from_row(row.as_ref()).unwrap(), cell)
}

fn slot_visible(stored: &StoredGroup, p: u64) -> bool {
    stored
        .slots
        .iter()
        .any(|(at, slot)| *at == Position(p) && slot.visible)
}

#[test]
fn a_mark_over_an_accepted_slot_writes_only_the_watermark_and_the_slot_stays_visible() {
    let mut node = Node::new(1);
    let first = write(1, Some(1), "one");
    assert_eq!(
        accept_result(node.ask(accept(1, ballot(1), first.clone(), false))),
        megastore_paxos::messages::AcceptResult::Accepted
    );
    let (_, accepted_cell) = stored(&node, 1);
    assert!(matches!(
        node.ask(mark(1, ballot(1), first.clone())),
        ReplicaReply::MarkedVisible { .. }
    ));
    let (after, marked_cell) = stored(&node, 1);
    assert_eq!(
        marked_cell, accepted_cell,
        "the log cell is not written again"
    );
    assert_eq!(after.visible, Position(1));
    assert!(slot_visible(&after, 1), "visible below the watermark");

    // Past a gap (nothing at 2) the watermark cannot say it: the cell does.
    let third = write(3, Some(1), "three");
    accept_result(node.ask(accept(3, ballot(1), third.clone(), false)));
    let (_, accepted_third) = stored(&node, 3);
    assert!(matches!(
        node.ask(mark(3, ballot(1), third)),
        ReplicaReply::MarkedVisible { .. }
    ));
    let (after, marked_third) = stored(&node, 3);
    assert_ne!(marked_third, accepted_third, "rewritten as visible");
    assert_eq!(after.visible, Position(1));
    assert!(slot_visible(&after, 3));

    // After a restart, position 1 is known visible: another value is refused there.
    node.restart();
    assert!(matches!(
        node.ask(mark(1, ballot(1), first)),
        ReplicaReply::MarkedVisible { .. }
    ));
    assert!(
        refuses_another_value_at_1(&mut node),
        "a visible position keeps its value"
    );
}

/// Whether `node` refuses a mark of another value at position 1 (it knows 1 visible).
fn refuses_another_value_at_1(node: &mut Node) -> bool {
    let other = write(9, Some(1), "other");
    matches!(
        node.ask(mark(1, ballot(2), other)),
        ReplicaReply::Error {
            error: ReplicaError::Conflict(Position(1)),
            ..
        }
    )
}

/// The root row's `column` watermark cell as stored, if it was ever written.
fn watermark_cell(node: &Node, column: &[u8]) -> Option<Position> {
    let row = node
        .store
        .read_row(&root_row(&eg()), &KeyRange::all(), LATEST)
        .unwrap()?;
    let cell = row.cells.get(column)?;
    Some(postcard::from_bytes(&cell.value).unwrap())
}

#[test]
fn a_replica_that_applies_records_a_mark_in_its_applied_marker_alone_and_durably() {
    let first = write(1, Some(1), "one");
    // Full replica 1 accepted the value, so the mark writes no slot: the apply is its
    // one write. Read-only replica 4 votes on nothing: the mark writes the slot too.
    for id in [1, 4] {
        let mut node = Node::new(id);
        if id == 1 {
            accept_result(node.ask(accept(1, ballot(1), first.clone(), false)));
        }
        assert!(matches!(
            node.ask(mark(1, ballot(1), first.clone())),
            ReplicaReply::MarkedVisible {
                applied: Position(1),
                ..
            }
        ));
        // The reply left, so what it says survives a crash of the machine.
        node.restart();
        assert_eq!(watermark_cell(&node, VISIBLE), None, "replica {id}");
        assert_eq!(
            watermark_cell(&node, APPLIED),
            Some(Position(1)),
            "replica {id}: the mark's apply was synced before its reply"
        );
        let (after, _) = stored(&node, 1);
        assert_eq!(after.visible, Position(1), "replica {id}");
        assert!(slot_visible(&after, 1), "replica {id}");
        assert!(
            refuses_another_value_at_1(&mut node),
            "replica {id}: a visible position keeps its value"
        );
    }
}

#[test]
fn a_witness_which_applies_nothing_records_a_mark_in_its_visible_watermark() {
    let mut node = Node::new(3);
    let first = write(1, Some(1), "one");
    accept_result(node.ask(accept(1, ballot(1), first.clone(), false)));
    assert!(matches!(
        node.ask(mark(1, ballot(1), first)),
        ReplicaReply::MarkedVisible { .. }
    ));
    node.restart();
    assert_eq!(watermark_cell(&node, VISIBLE), Some(Position(1)));
    assert_eq!(watermark_cell(&node, APPLIED), None);
    assert_eq!(stored(&node, 1).0.visible, Position(1));
}
