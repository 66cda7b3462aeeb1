//! The two-phase records and lock rule, and the operations' steps against answers
//! given by hand.

use std::collections::BTreeSet;
use std::time::Duration;

use megastore_rowstore::{KeyRange, Row};
use megastore_types::{ClientId, EgId, Position, ReplicaId, Time, TxnId};

use super::collect::{
    AfterPage, COLLECT_PAGE, CollectDecisions, CollectedDecisions, CollectionPass,
};
use super::commit::{Participant, TwoPhaseCommit, TwoPhaseResult};
use super::decide::{Decide, DecideOutcome, MayAbort, Patience, TwoPhaseClock};
use super::settle::{SettleOutcome, SettlePrepared};
use super::*;
use crate::bugs::ProtocolBugs;
use crate::proposer::commit::CommitResult;
use crate::proposer::read::{ReadPath, ReadResult};
use crate::proposer::resolve::Resolution;
use crate::steps::{Ended, Step};

fn g(name: &str) -> EgId {
    EgId(name.as_bytes().to_vec())
}

fn row_of(eg: &EgId, key: &str) -> Vec<u8> {
    [eg.0.as_slice(), b"\x01", key.as_bytes()].concat()
}

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(3),
        seq,
    }
}

fn set(row: Vec<u8>, value: &str) -> RowWrite {
    RowWrite {
        row,
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: value.as_bytes().to_vec(),
        }],
    }
}

fn prepared(eg: &EgId, writes: &[&str], reads: &[&str]) -> Prepared {
    Prepared {
        txn: txn(1),
        coordinator: g("c"),
        participants: vec![g("c"), eg.clone()],
        prepared_ms: 1_000,
        writes: writes.iter().map(|k| row_of(eg, k)).collect(),
        read_rows: reads.iter().map(|k| row_of(eg, k)).collect(),
        read_ranges: Vec::new(),
    }
}

/// The row a write leaves (sets only).
fn stored(write: &RowWrite) -> Row {
    write.as_row(5)
}

fn read(position: u64, rows: Vec<Row>, prepared: Vec<Prepared>) -> ReadResult {
    ReadResult {
        position: Some(Position(position)),
        rows,
        replica: ReplicaId(1),
        next_leader: Some(ReplicaId(1)),
        path: ReadPath::Majority,
        prepared,
    }
}

fn clock() -> TwoPhaseClock {
    TwoPhaseClock {
        timeout: Duration::from_secs(2),
        wall_offset_ms: 0,
        poll: Duration::from_millis(100),
        bugs: ProtocolBugs::NONE,
    }
}

fn at_ms(ms: u64) -> Time {
    Time::from_nanos(ms * 1_000_000)
}

/// A decision read that finds none, at `position`, with `coordinator`'s collection
/// watermark at `through_ms` (so an absence at or below it needs a record's recheck).
fn none_through(coordinator: &EgId, position: u64, through_ms: u64) -> Ended {
    let watermark = stored(&watermark_write(coordinator, through_ms));
    Ended::Read(Ok(read(position, vec![watermark], vec![])))
}

fn facts(prepared_ms: u64, participants: &[&EgId]) -> TxnFacts {
    TxnFacts {
        prepared_ms,
        participants: participants.iter().map(|&eg| eg.clone()).collect(),
    }
}

#[test]
fn a_record_reads_back_as_it_was_staged_in_order() {
    let b = g("b");
    let staged = vec![
        RowWrite {
            row: row_of(&b, "x"),
            cells: vec![
                CellWrite::Set {
                    column: b"v".to_vec(),
                    value: b"1".to_vec(),
                },
                CellWrite::Delete {
                    column: b"w".to_vec(),
                },
                CellWrite::Set {
                    column: b"a".to_vec(),
                    value: b"2".to_vec(),
                },
            ],
        },
        set(row_of(&b, "y"), "3"),
    ];
    let p = prepared(&b, &["x", "y"], &[]);
    let write = prepare_write(&b, &p, &staged).unwrap();
    assert_eq!(write.row, record_row(&b, p.txn));
    assert!(records_range(&b).contains(&write.row));
    assert!(two_phase_range(&b).contains(&decision_row(&b, p.txn)));
    let record = record_of(&b, &stored(&write)).expect("decodes");
    assert_eq!(record.prepared, p);
    assert_eq!(record.staged, staged, "cells keep their order within a row");
    assert_eq!(pending(&b, &[stored(&write)]), vec![p.clone()]);
    assert_eq!(
        prepared_in(
            &b,
            &LogEntry {
                writes: vec![write.clone()],
                ..LogEntry::noop()
            }
        ),
        vec![p.clone()]
    );
    // Another group's rows are not its records.
    assert_eq!(pending(&g("other"), &[stored(&write)]), Vec::new());

    let commit = finish_writes(&b, &record, Decision::Commit);
    assert_eq!(&commit[..2], &staged[..]);
    let removal = commit.last().unwrap();
    assert_eq!(removal.row, write.row);
    assert_eq!(
        removal.cells.len(),
        write.cells.len(),
        "every column of the record is deleted"
    );
    let abort = finish_writes(&b, &record, Decision::Abort);
    assert_eq!(abort.len(), 1, "an abort applies nothing");
    let entry = |writes| LogEntry {
        writes,
        ..LogEntry::noop()
    };
    assert_eq!(
        finished_in(&b, &entry(commit)),
        vec![(write.row.clone(), true)]
    );
    assert_eq!(
        finished_in(&b, &entry(abort)),
        vec![(write.row.clone(), false)]
    );
}

#[test]
fn a_record_over_the_limits_is_refused_naming_them() {
    let b = g("b");
    let p = prepared(&b, &["x"], &[]);
    let long_column = RowWrite {
        row: row_of(&b, "x"),
        cells: vec![CellWrite::Delete {
            column: vec![b'c'; COLUMN_BYTES_MAX - 2],
        }],
    };
    assert!(matches!(
        prepare_write(&b, &p, &[long_column]),
        Err(TwoPhaseError::ColumnTooLong { .. })
    ));
    let big: Vec<RowWrite> = (0..20)
        .map(|i| RowWrite {
            row: row_of(&b, &format!("k{i}")),
            cells: vec![CellWrite::Set {
                column: b"v".to_vec(),
                value: vec![0; VALUE_BYTES_MAX],
            }],
        })
        .collect();
    let err = prepare_write(&b, &p, &big).unwrap_err();
    assert!(matches!(err, TwoPhaseError::RecordTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("group eg:b"), "{err}");
    assert_eq!(
        check_no_reserved_writes(&b, &[set(record_row(&b, p.txn), "x")]),
        Err(TwoPhaseError::ReservedWrite(b.clone()))
    );
}

#[test]
fn a_prepared_transaction_locks_what_it_read_and_writes() {
    let b = g("b");
    let mut p = prepared(&b, &["w"], &["r"]);
    p.read_ranges = vec![(row_of(&b, "s0"), Some(row_of(&b, "s9")))];
    let reads = |rows: &[&str], ranges: Vec<KeyRange>| ReadSet {
        rows: rows.iter().map(|k| row_of(&b, k)).collect(),
        ranges,
        prepared: Vec::new(),
    };
    let locked = |reads: &ReadSet, writes: &[&str]| {
        let writes: Vec<Vec<u8>> = writes.iter().map(|k| row_of(&b, k)).collect();
        p.conflicts_with(reads, writes.iter().map(Vec::as_slice))
    };
    // Writers of what it read or writes, readers of what it writes.
    assert_eq!(locked(&reads(&[], vec![]), &["w"]), vec![row_of(&b, "w")]);
    assert_eq!(locked(&reads(&[], vec![]), &["r"]), vec![row_of(&b, "r")]);
    assert_eq!(
        locked(&reads(&[], vec![]), &["s5"]),
        vec![row_of(&b, "s5")],
        "its scanned range"
    );
    assert_eq!(
        locked(&reads(&["w"], vec![]), &["z"]),
        vec![row_of(&b, "w")]
    );
    let scan = KeyRange::prefix(b.0.clone());
    assert_eq!(
        locked(&reads(&[], vec![scan]), &[]),
        vec![row_of(&b, "w")],
        "a scan over its write"
    );
    // Readers of what it only read, and everything else, go on.
    assert!(locked(&reads(&["r", "z"], vec![]), &["z"]).is_empty());
    // Reads learn its decision only of rows it writes.
    assert!(p.writes_any_of(&DataQuery::Rows(vec![row_of(&b, "w")])));
    assert!(!p.writes_any_of(&DataQuery::Rows(vec![row_of(&b, "r")])));
    assert!(p.writes_any_of(&DataQuery::Scan {
        range: KeyRange::prefix(b.0.clone()),
        limit: None,
        reverse: false
    }));
    // The read set's view: which prepared transactions block a commit.
    let mut seen = reads(&[], vec![]);
    seen.saw_prepared(&[p.clone(), p.clone()]);
    assert_eq!(seen.prepared.len(), 1, "each once");
    let (blocking, keys) = seen.blocked_by([row_of(&b, "w")].iter().map(Vec::as_slice));
    assert_eq!((blocking, keys), (vec![p.clone()], vec![row_of(&b, "w")]));
    assert!(
        seen.blocked_by([row_of(&b, "z")].iter().map(Vec::as_slice))
            .0
            .is_empty()
    );
    assert!(!p.expired(2_999, Duration::from_secs(2)));
    assert!(p.expired(3_000, Duration::from_secs(2)));
}

fn participant(eg: &EgId, position: u64, write: &str) -> Participant {
    Participant {
        eg: eg.clone(),
        read_position: Position(position),
        leader: Some(ReplicaId(1)),
        writes: vec![set(row_of(eg, write), "new")],
        reads: ReadSet::from(BTreeSet::from([row_of(eg, write)])),
    }
}

fn committed(position: u64) -> Ended {
    Ended::Commit(CommitResult::Committed {
        position: Position(position),
        fast: true,
    })
}

#[test]
fn a_commit_prepares_then_decides_then_finishes() {
    let (c, b, d) = (g("c"), g("b"), g("d"));
    let parts = vec![
        participant(&c, 4, "x"),
        participant(&b, 7, "y"),
        participant(&d, 2, "z"),
    ];
    let (mut commit, steps) =
        TwoPhaseCommit::start(at_ms(500), txn(1), parts, Some(ReplicaId(2)), clock()).unwrap();
    // The prepares, in parallel, as the transaction's own commits of a record.
    assert_eq!(steps.len(), 2);
    for (tag, step) in &steps {
        let Step::Commit {
            eg,
            writes,
            reads,
            txn: t,
            ..
        } = step
        else {
            panic!("{step:?}");
        };
        assert_eq!(*t, Some(txn(1)));
        assert_eq!(writes.len(), 1);
        assert!(records_range(eg).contains(&writes[0].row));
        assert!(reads.covers(&row_of(eg, if *tag == 1 { "y" } else { "z" })));
    }
    assert!(
        commit.on_ended(at_ms(510), 1, committed(8)).is_empty(),
        "waits for d"
    );
    let decision = commit.on_ended(at_ms(520), 2, committed(3));
    let [
        (
            0,
            Step::Commit {
                eg,
                writes,
                reads,
                txn: t,
                ..
            },
        ),
    ] = &decision[..]
    else {
        panic!("{decision:?}");
    };
    assert_eq!((eg, *t), (&c, Some(txn(1))));
    assert_eq!(
        writes[0],
        set(row_of(&c, "x"), "new"),
        "its own writes there"
    );
    assert_eq!(
        writes[1],
        decision_write(&c, txn(1), Decision::Commit, &facts(500, &[&c, &b, &d]))
    );
    assert!(
        reads.covers(&decision_row(&c, txn(1))),
        "an abort recorded first conflicts"
    );
    let finishes = commit.on_ended(at_ms(530), 0, committed(5));
    assert_eq!(finishes.len(), 2);
    for (tag, step) in finishes {
        let Step::Commit {
            eg,
            read_position,
            leader,
            writes,
            reads,
            txn: t,
        } = step
        else {
            panic!("{step:?}");
        };
        assert_eq!(t, None, "a finish is the core's own transaction");
        assert_eq!(
            leader,
            Some(ReplicaId(2)),
            "through the leader its prepare named"
        );
        let (at, key) = if eg == b { (8, "y") } else { (3, "z") };
        assert_eq!(read_position, Position(at), "right after its prepare");
        assert_eq!(writes[0], set(row_of(&eg, key), "new"));
        assert!(
            reads.covers(&record_row(&eg, txn(1))),
            "two finishers conflict"
        );
        assert!(commit.result().is_none());
        commit.on_ended(at_ms(540), tag, committed(at + 1));
    }
    assert_eq!(
        commit.result(),
        Some(&TwoPhaseResult::Committed {
            position: Position(5),
            prepared: vec![Position(8), Position(3)],
            finished: true
        })
    );
}

/// A commit across c, b and d (begun at 500 ms) that b prepared and d refused: it and
/// the steps it took next.
fn refused_by_d() -> (TwoPhaseCommit, Vec<(u32, Step)>) {
    let (c, b, d) = (g("c"), g("b"), g("d"));
    let parts = vec![
        participant(&c, 4, "x"),
        participant(&b, 7, "y"),
        participant(&d, 2, "z"),
    ];
    let (mut commit, _) = TwoPhaseCommit::start(at_ms(500), txn(1), parts, None, clock()).unwrap();
    commit.on_ended(at_ms(510), 1, committed(8));
    let conflict = Ended::Commit(CommitResult::Conflict {
        keys: vec![row_of(&d, "z")],
    });
    let steps = commit.on_ended(at_ms(520), 2, conflict);
    (commit, steps)
}

#[test]
fn a_refused_prepare_aborts_recorded_first_and_finishes_the_prepared() {
    let (c, b, d) = (g("c"), g("b"), g("d"));
    let (mut commit, record) = refused_by_d();
    let [
        (
            tag,
            Step::Read {
                eg,
                query,
                settle: false,
            },
        ),
    ] = &record[..]
    else {
        panic!("{record:?}");
    };
    assert_eq!(eg, &c, "the decision row is read first");
    assert_eq!(
        query,
        &DataQuery::Rows(vec![decision_row(&c, txn(1)), watermark_row(&c)]),
        "with the collection watermark"
    );
    // A collection took transactions prepared up to 500 ms (its own time): the absence
    // needs a recheck.
    let recheck = commit.on_ended(at_ms(530), *tag, none_through(&c, 6, 500));
    let [(tag, Step::Read { eg, query, .. })] = &recheck[..] else {
        panic!("{recheck:?}");
    };
    assert_eq!(
        eg, &b,
        "the absence is confirmed where it is prepared (not d)"
    );
    assert_eq!(query, &DataQuery::Rows(vec![record_row(&b, txn(1))]));
    let record = Row {
        key: record_row(&b, txn(1)),
        cells: Default::default(),
    };
    let abort = commit.on_ended(
        at_ms(531),
        *tag,
        Ended::Read(Ok(read(9, vec![record], vec![]))),
    );
    let [
        (
            tag,
            Step::Commit {
                eg,
                writes,
                reads,
                read_position,
                ..
            },
        ),
    ] = &abort[..]
    else {
        panic!("{abort:?}");
    };
    assert_eq!((eg, *read_position), (&c, Position(6)));
    assert_eq!(
        writes,
        &vec![decision_write(
            &c,
            txn(1),
            Decision::Abort,
            &facts(500, &[&c, &b, &d])
        )]
    );
    assert!(reads.covers(&decision_row(&c, txn(1))));
    let finishes = commit.on_ended(at_ms(540), *tag, committed(7));
    let [(tag, Step::Commit { eg, writes, .. })] = &finishes[..] else {
        panic!("only b was prepared: {finishes:?}");
    };
    assert_eq!(eg, &b);
    assert_eq!(writes.len(), 1, "the record's removal, nothing applied");
    commit.on_ended(at_ms(550), *tag, committed(9));
    assert_eq!(
        commit.result(),
        Some(&TwoPhaseResult::Aborted {
            keys: vec![row_of(&d, "z")]
        })
    );
}

#[test]
fn an_unknown_decision_is_resolved_by_the_transaction_id() {
    let (c, b) = (g("c"), g("b"));
    let parts = vec![participant(&c, 4, "x"), participant(&b, 7, "y")];
    let (mut commit, _) = TwoPhaseCommit::start(at_ms(500), txn(1), parts, None, clock()).unwrap();
    commit.on_ended(at_ms(510), 1, committed(8));
    let unknown = Ended::Commit(CommitResult::Unknown {
        position: Position(5),
    });
    let resolve = commit.on_ended(at_ms(520), 0, unknown);
    assert!(
        matches!(&resolve[..], [(0, Step::Resolve { eg, position: Position(5), span: false, txn: t })] if *eg == c && *t == txn(1)),
        "{resolve:?}"
    );
    assert!(
        commit
            .on_ended(at_ms(530), 0, Ended::Resolve(Resolution::Undecided))
            .is_empty()
    );
    assert_eq!(
        commit.result(),
        Some(&TwoPhaseResult::Unknown {
            coordinator: c,
            prepared_ms: 500
        })
    );
}

#[test]
fn a_decision_its_span_resolution_missed_is_read_back_at_the_position_its_row_names() {
    let (c, b) = (g("c"), g("b"));
    let parts = vec![participant(&c, 4, "x"), participant(&b, 7, "y")];
    let (mut commit, _) = TwoPhaseCommit::start(at_ms(500), txn(1), parts, None, clock()).unwrap();
    commit.on_ended(at_ms(510), 1, committed(8));
    // Its relay did not answer, and its span from 5 did not hold it: its span moved on
    // (`Member::span_moves`), so that is not final.
    let unknown = Ended::Commit(CommitResult::UnknownInSpan { first: Position(5) });
    let resolve = commit.on_ended(at_ms(520), 0, unknown);
    assert!(
        matches!(&resolve[..], [(0, Step::Resolve { span: true, .. })]),
        "{resolve:?}"
    );
    let record = commit.on_ended(at_ms(530), 0, Ended::Resolve(Resolution::NotCommitted));
    let [(tag, Step::Read { eg, .. })] = &record[..] else {
        panic!("abort is recorded, the decision row read first: {record:?}");
    };
    assert_eq!(eg, &c);
    // The decision landed at 12, after the span.
    let decided = decision_write(&c, txn(1), Decision::Commit, &facts(500, &[&c, &b]));
    let found = Ended::Read(Ok(read(20, vec![decided.as_row(12)], vec![])));
    let finishes = commit.on_ended(at_ms(540), *tag, found);
    let [(tag, Step::Commit { eg, writes, .. })] = &finishes[..] else {
        panic!("b is finished: {finishes:?}");
    };
    assert_eq!(eg, &b);
    assert_eq!(writes[0], set(row_of(&b, "y"), "new"), "as committed");
    commit.on_ended(at_ms(550), *tag, committed(9));
    assert_eq!(
        commit.result(),
        Some(&TwoPhaseResult::Committed {
            position: Position(12),
            prepared: vec![Position(8)],
            finished: true
        })
    );
}

#[test]
fn two_groups_at_least_each_once() {
    let c = g("c");
    let start = |parts| TwoPhaseCommit::start(at_ms(0), txn(1), parts, None, clock()).map(|_| ());
    assert_eq!(
        start(vec![participant(&c, 1, "x")]),
        Err(TwoPhaseError::TooFewGroups)
    );
    assert_eq!(
        start(vec![participant(&c, 1, "x"), participant(&c, 1, "y")]),
        Err(TwoPhaseError::GroupTwice(c.clone()))
    );
}

#[test]
fn an_undecided_transaction_is_aborted_only_after_its_timeout_and_recorded_first() {
    let (c, b) = (g("c"), g("b"));
    let p = prepared(&b, &["w"], &[]);
    // Before the timeout a reader is told it is undecided.
    let pending = stored(&prepare_write(&b, &p, &[]).unwrap());
    let still_pending = || Ended::Read(Ok(read(9, vec![pending.clone()], vec![p.clone()])));
    let (mut settle, first) = SettlePrepared::start(b.clone(), &p, Patience::Report, clock());
    assert!(matches!(&first, Step::Read { eg, settle: false, .. } if *eg == c));
    // The decision read absent counts once the record is read pending after it.
    let recheck = settle.on_ended(at_ms(2_500), none_through(&c, 3, 1_000));
    assert!(
        matches!(&recheck, Some(Step::Read { eg, query: DataQuery::Rows(rows), .. }) if *eg == b && rows == &vec![record_row(&b, p.txn)]),
        "{recheck:?}"
    );
    assert!(settle.on_ended(at_ms(2_500), still_pending()).is_none());
    assert_eq!(settle.outcome(), Some(&SettleOutcome::Undecided));
    // A writer waits, asking again, until it expires (3,000 ms by the preparer's clock).
    let (mut decide, _) = Decide::start(
        c.clone(),
        p.txn,
        MayAbort::After(p.facts()),
        vec![b.clone()],
        Patience::Wait,
        clock(),
    );
    decide.on_ended(at_ms(2_950), none_through(&c, 3, 1_000));
    let wake = decide.on_ended(at_ms(2_950), still_pending());
    assert!(
        matches!(wake, Some(Step::Wake { at }) if at == at_ms(3_000)),
        "{wake:?}"
    );
    assert!(matches!(
        decide.on_ended(at_ms(3_000), Ended::Woke),
        Some(Step::Read { .. })
    ));
    decide.on_ended(at_ms(3_000), none_through(&c, 3, 1_000));
    let record = decide.on_ended(at_ms(3_000), still_pending());
    let Some(Step::Commit {
        writes,
        reads,
        read_position,
        ..
    }) = record
    else {
        panic!("{record:?}");
    };
    assert_eq!(
        read_position,
        Position(3),
        "at the position the decision was read absent"
    );
    assert_eq!(
        writes,
        vec![decision_write(&c, p.txn, Decision::Abort, &p.facts())]
    );
    assert!(reads.covers(&decision_row(&c, p.txn)));
    // A commit decision chosen meanwhile wins: the abort conflicts, and the decision is
    // read again.
    let again = decide.on_ended(
        at_ms(3_010),
        Ended::Commit(CommitResult::Conflict { keys: vec![] }),
    );
    assert!(matches!(again, Some(Step::Read { .. })));
    let decided = Row {
        key: decision_row(&c, p.txn),
        cells: stored(&decision_write(&c, p.txn, Decision::Commit, &p.facts())).cells,
    };
    assert!(
        decide
            .on_ended(
                at_ms(3_020),
                Ended::Read(Ok(read(4, vec![decided], vec![])))
            )
            .is_none()
    );
    assert_eq!(
        decide.outcome(),
        Some(&DecideOutcome::Decided(Decision::Commit))
    );
}

#[test]
fn a_settle_finishes_what_was_decided_and_a_finished_record_is_left_alone() {
    let (c, b) = (g("c"), g("b"));
    let p = prepared(&b, &["w"], &[]);
    let staged = vec![set(row_of(&b, "w"), "new")];
    let record = stored(&prepare_write(&b, &p, &staged).unwrap());
    let decided = Row {
        key: decision_row(&c, p.txn),
        cells: stored(&decision_write(&c, p.txn, Decision::Commit, &p.facts())).cells,
    };
    let (mut settle, _) = SettlePrepared::start(b.clone(), &p, Patience::Report, clock());
    let read_record = settle.on_ended(at_ms(10), Ended::Read(Ok(read(3, vec![decided], vec![]))));
    assert!(matches!(&read_record, Some(Step::Read { eg, settle: false, .. }) if *eg == b));
    let finish = settle.on_ended(
        at_ms(20),
        Ended::Read(Ok(read(9, vec![record], vec![p.clone()]))),
    );
    let Some(Step::Commit {
        writes,
        read_position,
        reads,
        ..
    }) = finish
    else {
        panic!("{finish:?}");
    };
    assert_eq!(read_position, Position(9));
    assert_eq!(writes[0], staged[0]);
    assert!(
        reads.prepared.is_empty(),
        "a finish is not locked out by its own record"
    );
    // Another finisher got there first: the record is gone when read again.
    let again = settle.on_ended(
        at_ms(30),
        Ended::Commit(CommitResult::Conflict { keys: vec![] }),
    );
    assert!(matches!(again, Some(Step::Read { .. })));
    assert!(
        settle
            .on_ended(at_ms(40), Ended::Read(Ok(read(10, vec![], vec![]))))
            .is_none()
    );
    assert_eq!(
        settle.outcome(),
        Some(&SettleOutcome::Finished(Decision::Commit))
    );
}

#[test]
fn a_decision_read_absent_is_trusted_above_the_watermark_or_while_a_record_is_pending() {
    let (c, b) = (g("c"), g("b"));
    let p = prepared(&b, &["w"], &[]);
    let expired = at_ms(5_000);
    let start = |bugs| {
        Decide::start(
            c.clone(),
            p.txn,
            MayAbort::After(p.facts()),
            vec![b.clone()],
            Patience::Report,
            TwoPhaseClock { bugs, ..clock() },
        )
        .0
    };
    // Finished in b, and its decision collected since: nothing to abort.
    let mut decide = start(ProtocolBugs::NONE);
    let recheck = decide.on_ended(expired, none_through(&c, 3, 1_000));
    assert!(matches!(&recheck, Some(Step::Read { eg, .. }) if *eg == b));
    let reread = decide.on_ended(expired, Ended::Read(Ok(read(9, vec![], vec![]))));
    assert!(
        matches!(&reread, Some(Step::Read { eg, .. }) if *eg == c),
        "the decision is read again: {reread:?}"
    );
    assert!(
        decide
            .on_ended(expired, Ended::Read(Ok(read(4, vec![], vec![]))))
            .is_none()
    );
    assert_eq!(decide.outcome(), Some(&DecideOutcome::Gone));
    // Decided between the first read and the record's finish: the second read finds it.
    let mut decide = start(ProtocolBugs::NONE);
    decide.on_ended(expired, none_through(&c, 3, 1_000));
    decide.on_ended(expired, Ended::Read(Ok(read(9, vec![], vec![]))));
    let decided = Row {
        key: decision_row(&c, p.txn),
        cells: stored(&decision_write(&c, p.txn, Decision::Commit, &p.facts())).cells,
    };
    decide.on_ended(expired, Ended::Read(Ok(read(4, vec![decided], vec![]))));
    assert_eq!(
        decide.outcome(),
        Some(&DecideOutcome::Decided(Decision::Commit))
    );
    // The knob trusts the absence: a finished, collected transaction is aborted afresh.
    let mut bugs = ProtocolBugs::NONE;
    bugs.trust_absent_decision = true;
    let mut decide = start(bugs);
    let abort = decide.on_ended(expired, none_through(&c, 3, 1_000));
    assert!(matches!(abort, Some(Step::Commit { .. })), "{abort:?}");
    // Prepared after everything collected there: the absence is real, no recheck.
    let mut decide = start(ProtocolBugs::NONE);
    let abort = decide.on_ended(expired, none_through(&c, 3, 999));
    assert!(
        matches!(
            &abort,
            Some(Step::Commit {
                read_position: Position(3),
                ..
            })
        ),
        "{abort:?}"
    );
}

/// A decision row of transaction `seq` (prepared at `prepared_ms` across c, b and d),
/// as a replica returns it; `facts: false` for a row written before rows had them.
fn decision_at(c: &EgId, seq: u64, prepared_ms: u64, with_facts: bool) -> Row {
    let (b, d) = (g("b"), g("d"));
    let mut write = decision_write(
        c,
        txn(seq),
        Decision::Commit,
        &facts(prepared_ms, &[c, &b, &d]),
    );
    if !with_facts {
        write.cells.truncate(1);
    }
    Row {
        key: write.row.clone(),
        cells: stored(&write).cells,
    }
}

fn collect_page(bugs: ProtocolBugs) -> (CollectDecisions, Vec<(u32, Step)>) {
    let c = g("c");
    let (mut collect, (tag, first)) = CollectDecisions::start(
        c.clone(),
        None,
        Duration::from_secs(60),
        TwoPhaseClock { bugs, ..clock() },
    );
    assert!(
        matches!(&first, Step::Read { query: DataQuery::Rows(rows), .. } if rows == &vec![watermark_row(&c)]),
        "the watermark first: {first:?}"
    );
    let watermark = stored(&watermark_write(&c, 900));
    let next = collect.on_ended(
        at_ms(99_990),
        tag,
        Ended::Read(Ok(read(5, vec![watermark], vec![]))),
    );
    assert_eq!(next.len(), 1, "the page next: {next:?}");
    let (tag, scan) = next.into_iter().next().expect("the page's read");
    assert!(
        matches!(&scan, Step::Read { eg, query: DataQuery::Scan { range, limit: Some(COLLECT_PAGE), .. }, .. } if *eg == c && *range == decisions_range(&c)),
        "{scan:?}"
    );
    let page = vec![
        decision_at(&c, 1, 1_000, true),
        decision_at(&c, 2, 1_000, true),
        decision_at(&c, 3, 1_000, false),
        decision_at(&c, 4, 50_000, true),
    ];
    let reads = collect.on_ended(at_ms(100_000), tag, Ended::Read(Ok(read(7, page, vec![]))));
    (collect, reads)
}

#[test]
fn a_collection_deletes_old_decisions_whose_records_are_all_gone() {
    let (c, b) = (g("c"), g("b"));
    let (mut collect, reads) = collect_page(ProtocolBugs::NONE);
    // Transactions 1 and 2 are old enough; 3 has no facts, 4 is within the retention.
    assert_eq!(reads.len(), 4, "b and d for each of 1 and 2: {reads:?}");
    let mut deleted = Vec::new();
    for (tag, step) in reads {
        let Step::Read {
            eg,
            query: DataQuery::Rows(rows),
            ..
        } = step
        else {
            panic!("{step:?}");
        };
        // Transaction 2 is still prepared in b.
        let pending = eg == b && rows == vec![record_row(&b, txn(2))];
        let found = match pending {
            true => vec![Row {
                key: rows[0].clone(),
                cells: Default::default(),
            }],
            false => vec![],
        };
        deleted = collect.on_ended(at_ms(100_001), tag, Ended::Read(Ok(read(3, found, vec![]))));
    }
    let [
        (
            _,
            Step::Commit {
                eg,
                read_position,
                writes,
                reads,
                txn: None,
                ..
            },
        ),
    ] = &deleted[..]
    else {
        panic!("{deleted:?}");
    };
    assert_eq!(
        (eg, *read_position),
        (&c, Position(5)),
        "at the watermark's position, before the page's"
    );
    assert_eq!(
        writes,
        &vec![
            decision_delete(&decision_row(&c, txn(1))),
            watermark_write(&c, 1_000)
        ],
        "the watermark raised to what it collected"
    );
    assert!(
        reads.covers(&decision_row(&c, txn(1))) && reads.covers(&watermark_row(&c)),
        "two collectors conflict"
    );
    assert!(collect.result().is_none());
    collect.on_ended(at_ms(100_002), u32::MAX, committed(8));
    assert_eq!(
        collect.result(),
        Some(&Ok(CollectedDecisions {
            collected: 1,
            kept: 3,
            next: None
        }))
    );
}

#[test]
fn collecting_unfinished_decisions_is_the_knob() {
    let c = g("c");
    let mut bugs = ProtocolBugs::NONE;
    bugs.collect_unfinished = true;
    let (_, steps) = collect_page(bugs);
    let [(_, Step::Commit { writes, .. })] = &steps[..] else {
        panic!("{steps:?}");
    };
    assert_eq!(
        writes,
        &vec![
            decision_delete(&decision_row(&c, txn(1))),
            decision_delete(&decision_row(&c, txn(2))),
            watermark_write(&c, 1_000)
        ],
        "deleted without a look at the records"
    );
}

#[test]
fn a_full_page_says_where_the_next_starts() {
    let c = g("c");
    let rows: Vec<Row> = (1..=COLLECT_PAGE as u64)
        .map(|seq| decision_at(&c, seq, 90_000, true))
        .collect();
    let last = rows.last().unwrap().key.clone();
    let (mut collect, (tag, _)) =
        CollectDecisions::start(c.clone(), None, Duration::from_secs(60), clock());
    let scan = collect.on_ended(at_ms(99_990), tag, Ended::Read(Ok(read(5, vec![], vec![]))));
    assert!(
        collect
            .on_ended(
                at_ms(100_000),
                scan[0].0,
                Ended::Read(Ok(read(7, rows, vec![])))
            )
            .is_empty()
    );
    let Some(Ok(done)) = collect.result() else {
        panic!("{:?}", collect.result());
    };
    assert_eq!(
        (done.kept, done.next.as_ref()),
        (COLLECT_PAGE as u64, Some(&last))
    );
    // The next page starts right after it.
    let (mut collect, (tag, _)) = CollectDecisions::start(
        c.clone(),
        Some(last.clone()),
        Duration::from_secs(60),
        clock(),
    );
    let next = collect.on_ended(at_ms(99_990), tag, Ended::Read(Ok(read(5, vec![], vec![]))));
    let (_, next) = next.into_iter().next().expect("the page's read");
    let Step::Read {
        query: DataQuery::Scan { range, .. },
        ..
    } = next
    else {
        panic!("{next:?}");
    };
    assert!(!range.contains(&last) && range.contains(&[last.as_slice(), &[0]].concat()));
    assert_eq!(range.end, decisions_range(&c).end);
}

#[test]
fn a_slow_client_aborting_after_its_transaction_was_aborted_and_collected_records_nothing() {
    let (c, b, d) = (g("c"), g("b"), g("d"));
    let (mut commit, read_decision) = refused_by_d();
    let tag = read_decision[0].0;
    // Someone met b's record, recorded abort, finished it, and collected the decision.
    let recheck = commit.on_ended(at_ms(9_000), tag, none_through(&c, 30, 500));
    assert!(
        matches!(&recheck[..], [(_, Step::Read { eg, .. })] if *eg == b),
        "{recheck:?}"
    );
    let reread = commit.on_ended(at_ms(9_010), tag, Ended::Read(Ok(read(40, vec![], vec![]))));
    assert!(
        matches!(&reread[..], [(_, Step::Read { eg, .. })] if *eg == c),
        "{reread:?}"
    );
    let nothing = commit.on_ended(at_ms(9_020), tag, Ended::Read(Ok(read(31, vec![], vec![]))));
    assert!(nothing.is_empty(), "no abort recorded afresh: {nothing:?}");
    assert_eq!(
        commit.result(),
        Some(&TwoPhaseResult::Aborted {
            keys: vec![row_of(&d, "z")]
        })
    );
}

/// A pass looks again when any of its pages kept a row, not only its last page.
#[test]
fn a_collection_pass_looks_again_when_any_page_kept_rows() {
    let page = |kept: u64, next: Option<&str>| CollectedDecisions {
        collected: 3,
        kept,
        next: next.map(|n| n.as_bytes().to_vec()),
    };
    let mut pass = CollectionPass::default();
    assert_eq!(
        pass.after_page(&page(2, Some("k"))),
        AfterPage::Next(b"k".to_vec())
    );
    assert_eq!(pass.after_page(&page(0, None)), AfterPage::LookAgain);
    let mut clean = CollectionPass::default();
    assert_eq!(clean.after_page(&page(0, None)), AfterPage::Done);
    // The knob: what earlier pages kept is forgotten.
    let mut bugs = ProtocolBugs::NONE;
    bugs.forget_kept_decisions = true;
    let mut forgetful = CollectionPass::new(bugs);
    assert_eq!(forgetful.after_page(&page(2, None)), AfterPage::Done);
}

/// A page of many old rows reads their records a few at a time: each answer sends the
/// next read, and the deleting commit follows the last answer.
#[test]
fn a_collection_has_a_bounded_number_of_record_reads_out() {
    let c = g("c");
    let rows: Vec<Row> = (1..=20)
        .map(|seq| decision_at(&c, seq, 1_000, true))
        .collect();
    let (mut collect, (tag, _)) =
        CollectDecisions::start(c.clone(), None, Duration::from_secs(60), clock());
    let scan = collect.on_ended(at_ms(99_990), tag, Ended::Read(Ok(read(5, vec![], vec![]))));
    let mut out = collect.on_ended(
        at_ms(100_000),
        scan[0].0,
        Ended::Read(Ok(read(7, rows, vec![]))),
    );
    assert_eq!(out.len(), 16, "16 of the 40 record reads at first");
    let mut answered = 0;
    let mut last = Vec::new();
    while let Some((tag, step)) = out.pop() {
        assert!(matches!(step, Step::Read { .. }), "{step:?}");
        last = collect.on_ended(
            at_ms(100_001),
            tag,
            Ended::Read(Ok(read(3, vec![], vec![]))),
        );
        answered += 1;
        if answered < 40 {
            assert!(out.len() + last.len() <= 16, "never more than 16 out");
            out.append(&mut last);
        }
    }
    assert_eq!(answered, 40, "every participant of every row read");
    let [(_, Step::Commit { writes, .. })] = &last[..] else {
        panic!("{last:?}");
    };
    assert_eq!(writes.len(), 21, "20 rows and the watermark");
}
