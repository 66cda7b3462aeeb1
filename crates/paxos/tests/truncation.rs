//! What a replica keeps of the log it truncates: whose entry was chosen at the last
//! [`CHOSEN_REMEMBERED`] positions, in its root row, so a writer can resolve a commit
//! whose outcome it missed after the log moved on.

use megastore_paxos::cells::{
    APPLIED, RootRowWrite, SlotRecord, StoredGroup, TRUNCATED, VISIBLE, chosen_column, encode,
    grant_column, log_column, promise_column,
};
use megastore_paxos::messages::ReplicaError;
use megastore_paxos::{
    CHOSEN_REMEMBERED, ChosenTxn, GroupLog, HISTORY_KEPT, LogEntry, ProtocolBugs, ReplicaOutput,
    ReplicaReply, ReplicaRequest, root_row,
};
use megastore_rowstore::{Durability, KeyRange, LATEST, MemoryStore, RowRead, RowStore};
use megastore_types::{Ballot, ClientId, EgId, Position, ReplicaKind, TxnId};

mod support;

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(1),
        seq,
    }
}

/// Every fifth position a no-op, every seventh an entry combining transactions `p`
/// and `p + 1000`, the others transaction `p`.
fn chosen_at(p: u64) -> ChosenTxn {
    if p.is_multiple_of(5) {
        ChosenTxn::NoOp
    } else if p.is_multiple_of(7) {
        ChosenTxn::of([txn(p), txn(p + 1000)])
    } else {
        ChosenTxn::Txn(txn(p))
    }
}

/// A group whose positions 1..=`last` are visible and applied here.
fn group(eg: &EgId, last: u64) -> GroupLog {
    let slot = |p: u64| SlotRecord {
        ballot: Ballot::ZERO,
        entry: match chosen_at(p) {
            ChosenTxn::NoOp => LogEntry::noop(),
            chosen => LogEntry::combining(chosen.txns().iter().map(|t| (*t, Vec::new())), None),
        },
        visible: true,
    };
    let stored = StoredGroup {
        slots: (1..=last).map(|p| (Position(p), slot(p))).collect(),
        visible: Position(last),
        applied: Position(last),
        ..StoredGroup::default()
    };
    GroupLog::load(eg.clone(), stored, Vec::new(), &ProtocolBugs::NONE, false)
}

/// Truncates through `through`, keeping the default history; what it asks to do.
fn truncate(log: &mut GroupLog, kind: ReplicaKind, through: Position) -> Vec<ReplicaOutput> {
    let mut out = Vec::new();
    log.truncate(kind, through, HISTORY_KEPT, &ProtocolBugs::NONE, &mut out);
    out
}

fn persist(store: &MemoryStore, out: Vec<ReplicaOutput>) {
    for output in out {
        if let ReplicaOutput::Persist { mutation } = output {
            store
                .mutate_row(&mutation, None, Durability::Synced)
                .unwrap();
        }
    }
}

#[test]
fn truncation_remembers_whose_entry_was_chosen_at_its_last_positions_across_restarts() {
    let eg = EgId(b"g".to_vec());
    let remembered = CHOSEN_REMEMBERED as u64;
    let last = remembered + 20;
    let store = MemoryStore::new();
    let mut log = group(&eg, last);
    // The root row holds the log the group was loaded from.
    let slots = (1..=last).fold(RootRowWrite::new(root_row(&eg)), |write, p| {
        write.slot(Position(p), log.slot(Position(p)).expect("loaded"))
    });
    store
        .mutate_row(&slots.0, None, Durability::Synced)
        .unwrap();
    let mut out = Vec::new();
    // Two truncations: the second pushes the first's oldest positions out.
    out.extend(truncate(&mut log, ReplicaKind::Full, Position(10)));
    out.extend(truncate(&mut log, ReplicaKind::Full, Position(last - 1)));
    persist(&store, out);
    let oldest = last - remembered;
    let check = |log: &GroupLog| {
        for p in 1..oldest {
            assert_eq!(log.chosen_at(Position(p)), None, "{p} is forgotten");
        }
        for p in oldest..last {
            assert_eq!(log.chosen_at(Position(p)), Some(chosen_at(p)), "{p}");
        }
        assert_eq!(log.chosen_at(Position(last)), None, "not truncated");
    };
    check(&log);

    // Read back from the root row, as a restart does.
    let row = store
        .read_row(&root_row(&eg), &KeyRange::all(), LATEST)
        .unwrap();
    let stored = StoredGroup::from_row(row.as_ref()).unwrap();
    assert_eq!(
        stored.chosen.len(),
        CHOSEN_REMEMBERED,
        "forgotten ones are deleted"
    );
    let slots_kept: Vec<Position> = stored.slots.iter().map(|(p, _)| *p).collect();
    assert_eq!(slots_kept, [Position(last)], "truncated slots are deleted");
    check(&GroupLog::load(
        eg,
        stored,
        Vec::new(),
        &ProtocolBugs::NONE,
        false,
    ));
}

#[test]
fn history_older_than_what_is_kept_is_collected_and_refused_to_reads() {
    let eg = EgId(b"g".to_vec());
    let kept = HISTORY_KEPT;
    let last = kept + 100;
    let mut log = group(&eg, last);
    let mut out = Vec::new();
    out.extend(truncate(&mut log, ReplicaKind::Full, Position(last - 1)));
    let below = Position(last - 1 - kept);
    // The watermark is persisted before the collection that relies on it.
    let persisted = out
        .iter()
        .position(|o| matches!(o, ReplicaOutput::Persist { .. }))
        .expect("a persist");
    let collected = out
        .iter()
        .position(|o| matches!(o, ReplicaOutput::CollectGarbage { below: b, .. } if *b == below))
        .unwrap_or_else(|| panic!("no collection below {below}: {out:?}"));
    assert!(persisted < collected);
    assert_eq!(log.history_from(), below);
    let store = MemoryStore::new();
    persist(&store, out);
    let row = store
        .read_row(&root_row(&eg), &KeyRange::all(), LATEST)
        .unwrap();
    let stored = StoredGroup::from_row(row.as_ref()).unwrap();
    assert_eq!(stored.collected, below, "kept across restarts");

    // A little more truncation does not collect again (each pass reads the group).
    let mut more = group(&eg, last + 10);
    let mut out = Vec::new();
    out.extend(truncate(&mut more, ReplicaKind::Full, Position(last - 1)));
    out.extend(truncate(&mut more, ReplicaKind::Full, Position(last + 9)));
    let passes = out
        .iter()
        .filter(|o| matches!(o, ReplicaOutput::CollectGarbage { .. }))
        .count();
    assert_eq!(passes, 1);

    // A witness keeps no data: nothing to collect.
    let mut witness = group(&eg, last);
    let mut out = Vec::new();
    out.extend(truncate(
        &mut witness,
        ReplicaKind::Witness,
        Position(last - 1),
    ));
    assert!(
        !out.iter()
            .any(|o| matches!(o, ReplicaOutput::CollectGarbage { .. }))
    );
}

/// docs/protocol.md, "Global indexes": truncating entries that wrote global index rows
/// (through the group's mirror) collects those rows' old versions up to the
/// truncation point — they are read only at their newest version — and a witness,
/// which holds no global rows, asks for nothing.
#[test]
fn truncation_collects_the_global_rows_its_entries_wrote() {
    use megastore_paxos::{CellWrite, RowWrite, mirror_row_of};
    let eg = EgId(b"g".to_vec());
    let global = b"\xfdPhotosByTag\x01sea".to_vec();
    let mirror_write = |p: u64, cell: CellWrite| SlotRecord {
        ballot: Ballot::ZERO,
        entry: LogEntry {
            txn: Some(txn(p)),
            writes: vec![RowWrite {
                row: mirror_row_of(&eg, &global),
                cells: vec![cell],
            }],
            ..LogEntry::noop()
        },
        visible: true,
    };
    let stored = StoredGroup {
        slots: [
            (
                Position(1),
                mirror_write(
                    1,
                    CellWrite::Set {
                        column: b"PhotosByTag".to_vec(),
                        value: Vec::new(),
                    },
                ),
            ),
            (
                Position(2),
                mirror_write(
                    2,
                    CellWrite::Delete {
                        column: b"PhotosByTag".to_vec(),
                    },
                ),
            ),
        ]
        .into_iter()
        .collect(),
        visible: Position(2),
        applied: Position(2),
        ..StoredGroup::default()
    };
    for (kind, expected) in [
        (ReplicaKind::Full, Some(vec![global.clone()])),
        (ReplicaKind::ReadOnly, Some(vec![global.clone()])),
        (ReplicaKind::Witness, None),
    ] {
        let mut log = GroupLog::load(
            eg.clone(),
            stored.clone(),
            Vec::new(),
            &ProtocolBugs::NONE,
            false,
        );
        let asked = truncate(&mut log, kind, Position(2))
            .into_iter()
            .find_map(|o| match o {
                ReplicaOutput::CollectGlobalGarbage { rows, below } => {
                    assert_eq!(below, Position(2));
                    Some(rows)
                }
                _ => None,
            });
        assert_eq!(asked, expected, "{kind:?}");
    }
}

#[test]
fn truncation_deletes_the_cells_a_position_holds_and_no_others() {
    let eg = EgId(b"g".to_vec());
    let mut stored = StoredGroup {
        slots: (1..=10)
            .map(|p| {
                let slot = SlotRecord {
                    ballot: Ballot::ZERO,
                    entry: LogEntry::noop(),
                    visible: true,
                };
                (Position(p), slot)
            })
            .collect(),
        visible: Position(10),
        applied: Position(10),
        ..StoredGroup::default()
    };
    // A promise at 3 (a ballot above 0 was prepared there) and a grant at 4 (this
    // replica led position 4; a `grant:<p>` cell of the older layout, deleted by the
    // load's own write, not by truncation); no other position holds either.
    stored.promises.push((Position(3), Ballot::ZERO));
    stored.grants.push((Position(4), txn(4)));
    let mut log = GroupLog::load(eg.clone(), stored, Vec::new(), &ProtocolBugs::NONE, false);
    let out = truncate(&mut log, ReplicaKind::Full, Position(6));
    let deletions: Vec<&megastore_rowstore::Mutation> = out
        .iter()
        .filter_map(|o| match o {
            ReplicaOutput::Persist { mutation } => Some(mutation),
            _ => None,
        })
        .flat_map(|m| &m.mutations)
        .filter(|m| !matches!(m, megastore_rowstore::Mutation::Set { .. }))
        .collect();
    let mut cells: Vec<Vec<u8>> = Vec::new();
    let mut ranges = Vec::new();
    for deletion in deletions {
        match deletion {
            megastore_rowstore::Mutation::DeleteCell { column, .. } => cells.push(column.clone()),
            megastore_rowstore::Mutation::DeleteColumns { columns } => ranges.push(columns.clone()),
            other => panic!("truncation wrote {other:?}"),
        }
    }
    cells.sort();
    assert_eq!(
        cells,
        vec![promise_column(Position(3))],
        "each deletion of a cell never written is a store write of its own"
    );
    assert_eq!(
        ranges.len(),
        1,
        "the slots go in one range deletion: {ranges:?}"
    );
    let held = |column: &[u8]| ranges[0].contains(column);
    assert!((1..=6).all(|p| held(&log_column(Position(p)))));
    assert!(!held(&log_column(Position(0))) && !held(&log_column(Position(7))));
    assert!(!held(&promise_column(Position(3))) && !held(&grant_column(Position(4))));
}

#[test]
fn a_replica_loading_records_of_the_layout_before_chosen_last_moves_them_into_it() {
    let eg = support::eg();
    let last = 30;
    let store = MemoryStore::new();
    let loaded = group(&eg, last);
    // The older layout: positions 1..=10 truncated, a `chosen:<p>` cell each.
    let mut row = (11..=last).fold(RootRowWrite::new(root_row(&eg)), |write, p| {
        write.slot(Position(p), loaded.slot(Position(p)).expect("loaded"))
    });
    for p in 1..=10 {
        row.0 = row
            .0
            .set(chosen_column(Position(p)), 0, encode(&chosen_at(p)));
    }
    let row = row
        .watermark(VISIBLE, Position(last))
        .watermark(APPLIED, Position(last))
        .watermark(TRUNCATED, Position(10));
    store.mutate_row(&row.0, None, Durability::Synced).unwrap();
    let read_back = |store: &MemoryStore| {
        let row = store
            .read_row(&root_row(&eg), &KeyRange::all(), LATEST)
            .unwrap();
        StoredGroup::from_row(row.as_ref()).unwrap()
    };
    assert!(read_back(&store).chosen_cells);

    // A replica over that store loads the group at its first request about it.
    let mut node = support::Node::cached_over(1, 8, store);
    let chosen_at_replica =
        |node: &mut support::Node, p: u64| match node.ask(ReplicaRequest::ReadLog {
            id: p,
            eg: eg.clone(),
            position: Position(p),
        }) {
            ReplicaReply::Error {
                error: ReplicaError::Truncated { chosen, .. },
                ..
            } => chosen,
            other => panic!("{p}: {other:?}"),
        };
    for p in 1..=10 {
        assert_eq!(chosen_at_replica(&mut node, p), Some(chosen_at(p)), "{p}");
    }
    let stored = read_back(&node.store);
    assert!(!stored.chosen_cells, "the per-position cells are gone");
    let mut expected: Vec<(Position, ChosenTxn)> =
        (1..=10).map(|p| (Position(p), chosen_at(p))).collect();
    expected.sort_by_key(|(p, _)| *p);
    let mut records = stored.chosen.clone();
    records.sort_by_key(|(p, _)| *p);
    assert_eq!(records, expected, "moved into `chosen_last`");

    // After a restart, and a truncation past them, they are still remembered.
    node.restart();
    for p in 1..=10 {
        assert_eq!(chosen_at_replica(&mut node, p), Some(chosen_at(p)), "{p}");
    }
    let mut log = GroupLog::load(
        eg.clone(),
        read_back(&node.store),
        Vec::new(),
        &ProtocolBugs::NONE,
        false,
    );
    persist(
        &node.store,
        truncate(&mut log, ReplicaKind::Full, Position(20)),
    );
    let log = GroupLog::load(
        eg.clone(),
        read_back(&node.store),
        Vec::new(),
        &ProtocolBugs::NONE,
        false,
    );
    for p in 1..=20 {
        assert_eq!(log.chosen_at(Position(p)), Some(chosen_at(p)), "{p}");
    }
    assert_eq!(log.chosen_at(Position(21)), None);
}
