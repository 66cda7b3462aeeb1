//! Two-phase commit across entity groups (docs/protocol.md, "Two-phase commit"): the
//! records it keeps in the groups' own logs, and the rules they impose. A cross-group
//! transaction `T` reads each participant group at a position of its own; then
//!
//! 1. **prepare**: every participant but the first commits a *prepared record* of `T`
//!    in its own log — the rows `T` read and writes there (its *locks*), and its writes,
//!    staged in the record rather than applied — with `T`'s reads there as the entry's
//!    read set, so they are valid up to the prepare;
//! 2. **decide**: once every one is prepared, the first participant (the *coordinator
//!    group*) commits `T`'s own writes there together with the *decision* row
//!    `commit`, its read set being `T`'s reads there plus the decision row;
//! 3. **finish**: every other participant commits the staged writes (or nothing, for
//!    an abort) and removes the record, its read set being the record row — two
//!    finishers racing conflict, so a transaction finishes once.
//!
//! While a record is pending in a group, it *locks* there: a commit that writes a row
//! `T` read or writes, or read a row `T` writes, does not proceed until `T` is decided
//! and finished ([`Prepared::conflicts_with`]); a current read of a row `T` writes
//! first learns `T`'s decision and, if there is one, finishes `T` — so once the
//! decision is recorded, every current read in every participant sees all of `T`'s
//! writes or none. Anyone who meets a pending record and finds no decision after the
//! *prepared timeout* records **abort** in the coordinator group first (a commit of
//! the decision row whose read set is that row, so a late `commit` decision conflicts
//! with it, and the other way round), then finishes the participant. A decision, once
//! recorded, never changes (*decision-stable*).
//!
//! Keys: under [`TWO_PHASE_OBJECT`], a participant's record of `T` is
//! `G ‖ 0xF8 FFFFFFFC ‖ 0x01 ‖ txn`, and a coordinator group's decision for `T` is
//! `C ‖ 0xF8 FFFFFFFC ‖ 0x02 ‖ txn`. Replicas return a group's pending records with
//! every read at a position (`ReplicaReply::Data::pending`), so every transaction knows
//! the locks at its position without asking.
//!
//! **Collection.** A decision row records, beside the decision, when its transaction
//! began preparing and its participants ([`TxnFacts`]). Once it is older than the
//! *decision retention* and every participant's record is gone, a collector deletes it
//! (`collect`), its read set the row, in the same entry raising the group's *collection
//! watermark* (the latest preparing time of any decision collected there). From then
//! on an absent decision may be a collected one, so *absent-decision-confirmed*: a
//! decision read absent counts only if, in the same read, the watermark is below the
//! transaction's preparing time (it was never collected), or else once a record of the
//! transaction is re-read present in some participant (no collection can have
//! happened yet: the collector reads every record absent first, and records never
//! reappear — a prepare is its transaction's entry, chosen at most once). Either way
//! an abort recorded at the absent read's position conflicts with a later decision or
//! collection. (A prepare whose client never learned its outcome can first land after
//! the collection; its transaction was decided abort, as commit waits for every
//! prepare, and whoever meets it records abort again: the same decision.)
//!
//! This module keeps the keys, the records and the lock rule; `decide`, `finish`,
//! `commit` (with `settle`) and `collect` are the operations [`crate::ClientCore`]
//! runs with them.

pub(crate) mod collect;
pub(crate) mod commit;
pub(crate) mod decide;
pub(crate) mod finish;
pub(crate) mod settle;

use std::collections::BTreeSet;
use std::time::Duration;

use megastore_rowstore::{KeyRange, Row};
use megastore_types::limits::{COLUMN_BYTES_MAX, ROW_BYTES_MAX, VALUE_BYTES_MAX};
use megastore_types::reserved::TWO_PHASE_OBJECT;
use megastore_types::{EgId, Position, TxnId};
use serde::{Deserialize, Serialize};

use crate::entry::{CellWrite, LogEntry, RowWrite};
use crate::messages::DataQuery;
use crate::proposer::commit::ReadSet;

const RECORD: u8 = 0x01;
const DECISION: u8 = 0x02;
const COLLECTED: u8 = 0x03;

/// The record row's column holding the [`Prepared`] summary (what replicas return).
const LOCKS: &[u8] = b"locks";
/// The decision row's column.
const DECIDED: &[u8] = b"decided";
/// The decision row's column holding its [`TxnFacts`] (what collecting it needs).
const FACTS: &[u8] = b"facts";
/// The collection watermark row's column.
const THROUGH: &[u8] = b"through";
/// A staged row's target key: column `r ‖ index`.
const TARGET: u8 = b'r';
/// A staged cell write: column `c ‖ index ‖ order ‖ op ‖ column`.
const STAGED: u8 = b'c';
const OP_SET: u8 = 1;
const OP_DELETE: u8 = 2;
/// What a staged cell's column adds to the application's column name.
const STAGED_COLUMN_OVERHEAD: usize = 1 + 4 + 4 + 1;

/// What a cross-group transaction was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Its writes take effect in every participant.
    Commit,
    /// None of its writes take effect anywhere.
    Abort,
}

/// What a decision row records beside the decision, so that it can be collected once
/// its transaction is finished everywhere (docs/protocol.md, "Two-phase commit",
/// collection): when the transaction began preparing, and where it has records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnFacts {
    /// When it began preparing, by its client's wall clock (ms since the Unix epoch).
    pub prepared_ms: u64,
    /// Every participant, the coordinator group first (it holds no record).
    pub participants: Vec<EgId>,
}

impl TxnFacts {
    /// The participants that hold a prepared record while it is pending: all but the
    /// coordinator group.
    pub fn recorded_in(&self) -> &[EgId] {
        self.participants.get(1..).unwrap_or_default()
    }
}

/// A transaction prepared in one participant group: who it is, who decides it, and what
/// it locks there (the rows it read and writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// The cross-group transaction (also the transaction of its prepare entries and of
    /// its decision's entry).
    pub txn: TxnId,
    /// The group whose log holds its decision.
    pub coordinator: EgId,
    /// Every participant, the coordinator first.
    pub participants: Vec<EgId>,
    /// When it began preparing, by its client's wall clock (ms since the Unix epoch):
    /// after the prepared timeout, anyone who meets it may record abort.
    pub prepared_ms: u64,
    /// The rows it writes in this group (staged in the record until it finishes).
    pub writes: BTreeSet<Vec<u8>>,
    /// The rows it read in this group.
    pub read_rows: BTreeSet<Vec<u8>>,
    /// The key ranges it scanned in this group (`start`, exclusive `end`).
    pub read_ranges: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Why a cross-group transaction cannot be prepared as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwoPhaseError {
    /// Fewer than two groups.
    #[error("a two-phase commit needs at least two groups")]
    TooFewGroups,
    /// A group named twice.
    #[error("group {0} is named twice")]
    GroupTwice(EgId),
    /// Its record in one group would be over a size limit.
    #[error(
        "its staged writes and keys in group {eg} take {found} bytes; a two-phase transaction's record in one group may take {limit}"
    )]
    RecordTooLarge {
        /// The group.
        eg: EgId,
        /// What the record would take.
        found: usize,
        /// The limit.
        limit: usize,
    },
    /// A column name too long to stage.
    #[error(
        "a column of {found} bytes cannot be staged for a two-phase commit; the limit is {limit}"
    )]
    ColumnTooLong {
        /// Its length.
        found: usize,
        /// The limit.
        limit: usize,
    },
    /// A write to a group's two-phase records.
    #[error("a transaction may not write the two-phase records of group {0}")]
    ReservedWrite(EgId),
}

impl Prepared {
    /// The ranges it scanned.
    fn ranges(&self) -> impl Iterator<Item = KeyRange> + '_ {
        self.read_ranges.iter().map(|(start, end)| KeyRange {
            start: start.clone(),
            end: end.clone(),
        })
    }

    /// Whether it locks `row` against writers: it read or writes it.
    fn locks_for_writers(&self, row: &[u8]) -> bool {
        self.writes.contains(row)
            || self.read_rows.contains(row)
            || self.ranges().any(|r| r.contains(row))
    }

    /// The rows of another transaction — which read `reads` and writes `writes` — that
    /// this prepared transaction locks: rows it read or writes that the other writes,
    /// and rows it writes that the other read. Empty: the other may commit while this
    /// one is undecided (serialized before it). Sorted, de-duplicated.
    pub fn conflicts_with<'w>(
        &self,
        reads: &ReadSet,
        writes: impl IntoIterator<Item = &'w [u8]>,
    ) -> Vec<Vec<u8>> {
        let mut rows: BTreeSet<Vec<u8>> = writes
            .into_iter()
            .filter(|w| self.locks_for_writers(w))
            .map(<[u8]>::to_vec)
            .collect();
        rows.extend(self.writes.iter().filter(|w| reads.covers(w)).cloned());
        rows.into_iter().collect()
    }

    /// Whether a read of `query` reads a row this transaction writes (such a read
    /// learns its decision first).
    pub fn writes_any_of(&self, query: &DataQuery) -> bool {
        match query {
            DataQuery::Rows(rows) => rows.iter().any(|r| self.writes.contains(r)),
            DataQuery::Scan { range, .. } => self.writes.iter().any(|w| range.contains(w)),
        }
    }

    /// Whether, at wall-clock time `wall_ms`, it has been prepared for longer than
    /// `timeout` (then anyone who finds it undecided records abort).
    pub fn expired(&self, wall_ms: u64, timeout: Duration) -> bool {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        wall_ms >= self.prepared_ms.saturating_add(timeout_ms)
    }

    /// What its decision row records beside the decision.
    pub fn facts(&self) -> TxnFacts {
        TxnFacts {
            prepared_ms: self.prepared_ms,
            participants: self.participants.clone(),
        }
    }
}

fn two_phase_prefix(eg: &EgId, kind: u8) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.extend_from_slice(&TWO_PHASE_OBJECT);
    row.push(kind);
    row
}

fn push_txn(row: &mut Vec<u8>, txn: TxnId) {
    row.extend_from_slice(&txn.client.0.to_be_bytes());
    row.extend_from_slice(&txn.seq.to_be_bytes());
}

/// The transaction whose decision `row` of `coordinator` holds, if it is a decision row.
pub fn txn_of_decision_row(coordinator: &EgId, row: &[u8]) -> Option<TxnId> {
    let suffix = row.strip_prefix(two_phase_prefix(coordinator, DECISION).as_slice())?;
    let (client, seq) = suffix.split_first_chunk::<4>()?;
    let seq: [u8; 8] = seq.try_into().ok()?;
    Some(TxnId {
        client: megastore_types::ClientId(u32::from_be_bytes(*client)),
        seq: u64::from_be_bytes(seq),
    })
}

/// Every two-phase row of `eg`: records, decisions.
pub fn two_phase_range(eg: &EgId) -> KeyRange {
    let mut prefix = eg.0.clone();
    prefix.extend_from_slice(&TWO_PHASE_OBJECT);
    KeyRange::prefix(prefix)
}

/// Every prepared record of `eg`: what a replica returns as pending with each read.
pub fn records_range(eg: &EgId) -> KeyRange {
    KeyRange::prefix(two_phase_prefix(eg, RECORD))
}

/// The column of a record row that replicas return with each read.
pub fn locks_column() -> KeyRange {
    KeyRange::single(LOCKS.to_vec())
}

/// The row of `eg` holding its prepared record of `txn`.
pub fn record_row(eg: &EgId, txn: TxnId) -> Vec<u8> {
    let mut row = two_phase_prefix(eg, RECORD);
    push_txn(&mut row, txn);
    row
}

/// The row of `coordinator` holding its decision for `txn`.
pub fn decision_row(coordinator: &EgId, txn: TxnId) -> Vec<u8> {
    let mut row = two_phase_prefix(coordinator, DECISION);
    push_txn(&mut row, txn);
    row
}

fn set(column: Vec<u8>, value: Vec<u8>) -> CellWrite {
    CellWrite::Set { column, value }
}

/// Every decision row of `coordinator`: what a collection scans.
pub fn decisions_range(coordinator: &EgId) -> KeyRange {
    KeyRange::prefix(two_phase_prefix(coordinator, DECISION))
}

/// The write that records `decision` for `txn` in `coordinator`'s log, with the facts
/// its collection needs.
pub fn decision_write(
    coordinator: &EgId,
    txn: TxnId,
    decision: Decision,
    facts: &TxnFacts,
) -> RowWrite {
    RowWrite {
        row: decision_row(coordinator, txn),
        cells: vec![
            set(
                DECIDED.to_vec(),
                postcard::to_allocvec(&decision).expect("a decision encodes"),
            ),
            set(
                FACTS.to_vec(),
                postcard::to_allocvec(facts).expect("a transaction's facts encode"),
            ),
        ],
    }
}

/// The row of `coordinator` holding its *collection watermark*: the latest preparing
/// time (ms) of any decision collected there. A decision of a transaction that began
/// preparing after it has never been collected.
pub fn watermark_row(coordinator: &EgId) -> Vec<u8> {
    two_phase_prefix(coordinator, COLLECTED)
}

/// The watermark `row` (read at [`watermark_row`]) holds: 0 when none.
pub fn watermark_of(row: Option<&Row>) -> u64 {
    row.and_then(|r| r.value(THROUGH))
        .and_then(|v| v.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The write that raises `coordinator`'s collection watermark to `through_ms`.
pub fn watermark_write(coordinator: &EgId, through_ms: u64) -> RowWrite {
    RowWrite {
        row: watermark_row(coordinator),
        cells: vec![set(THROUGH.to_vec(), through_ms.to_be_bytes().to_vec())],
    }
}

/// The write that collects decision `row` (of a transaction finished everywhere).
pub fn decision_delete(row: &[u8]) -> RowWrite {
    RowWrite {
        row: row.to_vec(),
        cells: [DECIDED, FACTS]
            .into_iter()
            .map(|column| CellWrite::Delete {
                column: column.to_vec(),
            })
            .collect(),
    }
}

/// The decision `row` (read at the decision row) holds, if any.
pub fn decision_of(row: Option<&Row>) -> Option<Decision> {
    postcard::from_bytes(row?.value(DECIDED)?).ok()
}

/// Where the decision `row` holds was chosen: its decision cell's timestamp, which is
/// the position of the entry that wrote it.
pub fn decided_at(row: Option<&Row>) -> Option<Position> {
    row?.cells.get(DECIDED).map(|cell| Position(cell.timestamp))
}

/// The facts a decision row records (none in rows written before they were).
pub fn facts_of(row: &Row) -> Option<TxnFacts> {
    postcard::from_bytes(row.value(FACTS)?).ok()
}

/// The decisions `entry` of `coordinator` writes: (decision row, what it now says —
/// `None` for a deletion or a value that is no decision, which no protocol path
/// writes).
pub fn decisions_in(coordinator: &EgId, entry: &LogEntry) -> Vec<(Vec<u8>, Option<Decision>)> {
    let range = KeyRange::prefix(two_phase_prefix(coordinator, DECISION));
    entry
        .writes
        .iter()
        .filter(|w| range.contains(&w.row))
        .filter_map(|w| {
            let cell = w.cells.iter().find(|c| c.column() == DECIDED)?;
            let decision = match cell {
                CellWrite::Set { value, .. } => postcard::from_bytes(value).ok(),
                CellWrite::Delete { .. } => None,
            };
            Some((w.row.clone(), decision))
        })
        .collect()
}

/// The row write of `eg` that prepares `prepared` there with `staged` (its writes in
/// `eg`, applied only when it finishes committed): one record row holding the locks and
/// each staged cell. Refused when the record would be over a size limit.
pub fn prepare_write(
    eg: &EgId,
    prepared: &Prepared,
    staged: &[RowWrite],
) -> Result<RowWrite, TwoPhaseError> {
    let locks = postcard::to_allocvec(prepared).expect("a prepared record encodes");
    let too_large = |found| TwoPhaseError::RecordTooLarge {
        eg: eg.clone(),
        found,
        limit: ROW_BYTES_MAX,
    };
    if locks.len() > VALUE_BYTES_MAX {
        return Err(too_large(locks.len()));
    }
    let row = record_row(eg, prepared.txn);
    let mut size = row.len() + LOCKS.len() + locks.len();
    let mut cells = vec![set(LOCKS.to_vec(), locks)];
    for (index, write) in staged.iter().enumerate() {
        let index = u32::try_from(index).expect("fewer staged rows than u32::MAX");
        let mut target = vec![TARGET];
        target.extend_from_slice(&index.to_be_bytes());
        size += target.len() + write.row.len();
        cells.push(set(target, write.row.clone()));
        for (order, cell) in write.cells.iter().enumerate() {
            let order = u32::try_from(order).expect("fewer cells than u32::MAX");
            let (op, value) = match cell {
                CellWrite::Set { value, .. } => (OP_SET, value.clone()),
                CellWrite::Delete { .. } => (OP_DELETE, Vec::new()),
            };
            let mut column = vec![STAGED];
            column.extend_from_slice(&index.to_be_bytes());
            column.extend_from_slice(&order.to_be_bytes());
            column.push(op);
            column.extend_from_slice(cell.column());
            if column.len() > COLUMN_BYTES_MAX {
                return Err(TwoPhaseError::ColumnTooLong {
                    found: cell.column().len(),
                    limit: COLUMN_BYTES_MAX - STAGED_COLUMN_OVERHEAD,
                });
            }
            size += column.len() + value.len();
            cells.push(set(column, value));
        }
    }
    if size > ROW_BYTES_MAX {
        return Err(too_large(size));
    }
    Ok(RowWrite { row, cells })
}

/// A record row as read back: the transaction's summary, and its staged writes in the
/// order they were given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Who, and what it locks.
    pub prepared: Prepared,
    /// Its writes in this group.
    pub staged: Vec<RowWrite>,
    /// Every column of the record row (what finishing it deletes).
    columns: Vec<Vec<u8>>,
}

impl Record {
    /// The record a prepare write of `eg` ([`prepare_write`]) stages, as a replica would
    /// read it back.
    pub fn of_write(eg: &EgId, write: &RowWrite) -> Option<Self> {
        record_of(eg, &write.as_row(0))
    }
}

/// The summary a record row (of `eg`) holds, if `row` is one.
pub fn prepared_of(eg: &EgId, row: &Row) -> Option<Prepared> {
    if !records_range(eg).contains(&row.key) {
        return None;
    }
    let prepared: Prepared = postcard::from_bytes(row.value(LOCKS)?).ok()?;
    (record_row(eg, prepared.txn) == row.key).then_some(prepared)
}

/// The record `row` (a whole record row of `eg`) holds, if it is one.
pub fn record_of(eg: &EgId, row: &Row) -> Option<Record> {
    let prepared = prepared_of(eg, row)?;
    let mut staged: Vec<RowWrite> = Vec::new();
    let index_of = |bytes: &[u8]| Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?));
    for (column, cell) in &row.cells {
        match column.first() {
            Some(&TARGET) => {
                let index = index_of(&column[1..])? as usize;
                if column.len() != 5 || index != staged.len() {
                    return None;
                }
                staged.push(RowWrite {
                    row: cell.value.clone(),
                    cells: Vec::new(),
                });
            }
            Some(&STAGED) => {}
            _ => {}
        }
    }
    // Cells sort by column, so each staged row's writes come in their order.
    for (column, cell) in &row.cells {
        if column.first() != Some(&STAGED) || column.len() < STAGED_COLUMN_OVERHEAD {
            continue;
        }
        let index = index_of(&column[1..])? as usize;
        let name = column[STAGED_COLUMN_OVERHEAD..].to_vec();
        let write = match column[STAGED_COLUMN_OVERHEAD - 1] {
            OP_SET => CellWrite::Set {
                column: name,
                value: cell.value.clone(),
            },
            OP_DELETE => CellWrite::Delete { column: name },
            _ => return None,
        };
        staged.get_mut(index)?.cells.push(write);
    }
    Some(Record {
        prepared,
        staged,
        columns: row.cells.keys().cloned().collect(),
    })
}

/// The pending records `rows` (a replica's answer of [`records_range`]) hold.
pub fn pending(eg: &EgId, rows: &[Row]) -> Vec<Prepared> {
    rows.iter().filter_map(|r| prepared_of(eg, r)).collect()
}

/// The writes that finish `record` (of `eg`) as `decision`: for a commit, its staged
/// writes; for either, the deletion of the record row.
pub fn finish_writes(eg: &EgId, record: &Record, decision: Decision) -> Vec<RowWrite> {
    let mut writes = match decision {
        Decision::Commit => record.staged.clone(),
        Decision::Abort => Vec::new(),
    };
    writes.push(RowWrite {
        row: record_row(eg, record.prepared.txn),
        cells: record
            .columns
            .iter()
            .map(|column| CellWrite::Delete {
                column: column.clone(),
            })
            .collect(),
    });
    writes
}

/// Whether applying `rows` (of `eg`) prepares a transaction there.
pub fn prepares_any(eg: &EgId, rows: &[megastore_rowstore::RowMutation]) -> bool {
    sets_column_in(&records_range(eg), LOCKS, rows)
}

/// Whether applying `rows` (of `eg`) records a cross-group decision there.
pub fn decides_any(eg: &EgId, rows: &[megastore_rowstore::RowMutation]) -> bool {
    sets_column_in(&decisions_range(eg), DECIDED, rows)
}

/// Whether any of `rows` inside `range` sets `column`.
fn sets_column_in(
    range: &KeyRange,
    column: &[u8],
    rows: &[megastore_rowstore::RowMutation],
) -> bool {
    rows.iter().any(|m| {
        range.contains(&m.row)
            && m.mutations.iter().any(
                |c| matches!(c, megastore_rowstore::Mutation::Set { column: set, .. } if set.as_slice() == column),
            )
    })
}

/// The transactions `entry` (of `eg`) prepares there.
pub fn prepared_in(eg: &EgId, entry: &LogEntry) -> Vec<Prepared> {
    let range = records_range(eg);
    entry
        .writes
        .iter()
        .filter(|w| range.contains(&w.row))
        .filter_map(|w| {
            let locks = w.cells.iter().find_map(|c| match c {
                CellWrite::Set { column, value } if column == LOCKS => Some(value),
                _ => None,
            })?;
            let prepared: Prepared = postcard::from_bytes(locks).ok()?;
            (record_row(eg, prepared.txn) == w.row).then_some(prepared)
        })
        .collect()
}

/// The transactions whose records `entry` (of `eg`) finishes (deletes), each with
/// whether it applied staged writes (`true`: finished as committed).
pub fn finished_in(eg: &EgId, entry: &LogEntry) -> Vec<(Vec<u8>, bool)> {
    let range = records_range(eg);
    let applies = entry.writes.iter().any(|w| !range.contains(&w.row));
    entry
        .writes
        .iter()
        .filter(|w| range.contains(&w.row))
        .filter(|w| {
            w.cells
                .iter()
                .any(|c| matches!(c, CellWrite::Delete { column } if column == LOCKS))
        })
        .map(|w| (w.row.clone(), applies))
        .collect()
}

/// The rows an entry's `writes` (of `eg`) write in effect, for conflicts and locks:
/// its rows, and for a prepare, the rows its prepared transaction will write there.
pub fn effective_writes(eg: &EgId, writes: &[RowWrite]) -> Vec<Vec<u8>> {
    let entry = LogEntry {
        writes: writes.to_vec(),
        ..LogEntry::noop()
    };
    let mut rows: Vec<Vec<u8>> = writes.iter().map(|w| w.row.clone()).collect();
    for prepared in prepared_in(eg, &entry) {
        rows.extend(prepared.writes);
    }
    rows
}

/// Whether `writes` (of `eg`) write a two-phase row: prepare, finish or collect a
/// record, record a decision or the collection's watermark. Such a transaction is
/// committed in a log entry of its own, never combined with others (docs/protocol.md,
/// "Combining commits"): what an entry prepares, finishes or decides is read from the
/// entry as a whole ([`prepared_in`], [`finished_in`], [`decisions_in`]), and a
/// prepare's locks hold only from the next position on.
pub fn writes_two_phase_rows(eg: &EgId, writes: &[RowWrite]) -> bool {
    let range = two_phase_range(eg);
    writes.iter().any(|w| range.contains(&w.row))
}

/// Whether `writes` stay out of `eg`'s two-phase rows (which only the protocol writes).
pub fn check_no_reserved_writes(eg: &EgId, writes: &[RowWrite]) -> Result<(), TwoPhaseError> {
    match writes_two_phase_rows(eg, writes) {
        true => Err(TwoPhaseError::ReservedWrite(eg.clone())),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests;
