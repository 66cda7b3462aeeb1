//! The root row's cells: how an acceptor's durable state is laid out (docs/architecture.md, "Data layout").
//!
//! | column | value |
//! |---|---|
//! | `promise:` ‖ p (8 bytes, big-endian) | the highest ballot promised at p |
//! | `log:` ‖ p | [`SlotRecord`]: accepted ballot and entry, and whether p is visible |
//! | `grant:` ‖ p | the layout before grants lived in memory: the transaction granted ballot 0 at p (position leader only). Read back, never written, and deleted when the group is loaded |
//! | `chosen_last` | [`ChosenTxn`] by position: whose entry was chosen at the last few truncated positions, rewritten whole by each truncation |
//! | `chosen:` ‖ p | the same for one position: the layout before `chosen_last`, moved into it when the group is loaded |
//! | `visible` | every position up to this one is visible here (or up to `applied`, if higher: [`stored_visible`]) |
//! | `applied` | every position up to this one is applied here |
//! | `truncated` | positions up to this one are gone |
//! | `installed` | the group was installed from a snapshot at this position: no history below it |
//! | `collected` | data versions that only reads below this position could see were garbage-collected |
//! | `rejoin_floor` | after a wipe: the highest position any voter held when this replica rejoined; it votes only above it |
//!
//! Every cell lives at timestamp 0 and is overwritten in place; values are postcard.
//! Positions are big-endian so each family sorts by position.

use megastore_rowstore::{KeyRange, Row, RowMutation};
use megastore_types::{Ballot, Position, TxnId};
use serde::{Deserialize, Serialize};

use crate::entry::LogEntry;
use crate::messages::ChosenTxn;

/// The timestamp of every root-row cell.
pub const CELL_TS: u64 = 0;

const PROMISE: &[u8] = b"promise:";
const LOG: &[u8] = b"log:";
const GRANT: &[u8] = b"grant:";
const CHOSEN: &[u8] = b"chosen:";
/// The column of the last truncated positions' [`ChosenTxn`]s. Outside the `chosen:`
/// family's range (`_` sorts after `;`), so that family's range deletion spares it.
const CHOSEN_LAST: &[u8] = b"chosen_last";
/// The contiguous-visible watermark column.
pub const VISIBLE: &[u8] = b"visible";
/// The applied watermark column.
pub const APPLIED: &[u8] = b"applied";
/// The truncation watermark column.
pub const TRUNCATED: &[u8] = b"truncated";
/// The snapshot-install column.
pub const INSTALLED: &[u8] = b"installed";
/// The garbage-collection watermark column.
pub const COLLECTED: &[u8] = b"collected";
/// The rejoin floor column.
pub const REJOIN_FLOOR: &[u8] = b"rejoin_floor";

/// The visible watermark a root row records: its `visible` cell, or its `applied`
/// cell where that is higher. Only visible positions are applied (invariant
/// *applied-below-visible*), so a replica that applies a position in the step that
/// marks it visible writes the `applied` marker alone, one cell instead of two per
/// commit; a witness, which applies nothing, writes `visible`.
pub fn stored_visible(visible: Position, applied: Position) -> Position {
    visible.max(applied)
}

/// What an acceptor keeps for one position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// The ballot the value was accepted at (for a visible slot: the ballot it was
    /// chosen at).
    pub ballot: Ballot,
    /// The accepted value.
    pub entry: LogEntry,
    /// The value is chosen and its invalidation step is done. Stored, it is true only
    /// of a slot marked visible past a gap: a slot at or below the `visible` watermark
    /// is visible whatever its cell says (invariant *visible-below-watermark*), so a
    /// mark that finds its value accepted at its ballot and moves the watermark over it
    /// writes the watermark alone ([`StoredGroup::from_row`] derives the flag).
    pub visible: bool,
}

impl SlotRecord {
    /// Read back from its cell at `p` of a group whose `visible` watermark is
    /// `visible`: visible if the cell says so or the watermark covers it (invariant
    /// visible-below-watermark — the watermark moves only over visible slots, and a mark
    /// that moved it over an accepted slot did not rewrite the slot).
    pub fn derive_visible(&mut self, p: Position, visible: Position) {
        self.visible |= p <= visible;
    }
}

fn column(family: &[u8], position: Position) -> Vec<u8> {
    [family, &position.0.to_be_bytes()].concat()
}

/// The `promise:<p>` column.
pub fn promise_column(p: Position) -> Vec<u8> {
    column(PROMISE, p)
}

/// The `log:<p>` column.
pub fn log_column(p: Position) -> Vec<u8> {
    column(LOG, p)
}

/// The `grant:<p>` column (the layout before grants lived in memory: read back, never
/// written).
pub fn grant_column(p: Position) -> Vec<u8> {
    column(GRANT, p)
}

/// The `chosen:<p>` column (the layout before `chosen_last`: read back, never written).
pub fn chosen_column(p: Position) -> Vec<u8> {
    column(CHOSEN, p)
}

/// The first column after `column` (a range's exclusive end that keeps `column` in).
fn just_after(column: &[u8]) -> Vec<u8> {
    [column, &[0]].concat()
}

/// Encodes a cell value.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("protocol types always serialize")
}

/// Why the root row could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("root row cell {column}: {detail}")]
pub struct CellError {
    /// The column, escaped.
    pub column: String,
    /// What is wrong.
    pub detail: String,
}

fn decode<'a, T: Deserialize<'a>>(column: &[u8], bytes: &'a [u8]) -> Result<T, CellError> {
    postcard::from_bytes(bytes).map_err(|e| CellError {
        column: column.escape_ascii().to_string(),
        detail: e.to_string(),
    })
}

/// The acceptor state stored in one root row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredGroup {
    /// `promise:<p>` cells.
    pub promises: Vec<(Position, Ballot)>,
    /// `log:<p>` cells.
    pub slots: Vec<(Position, SlotRecord)>,
    /// `grant:<p>` cells (the layout before grants lived in memory).
    pub grants: Vec<(Position, TxnId)>,
    /// The `chosen_last` cell's records, and any `chosen:<p>` cells.
    pub chosen: Vec<(Position, ChosenTxn)>,
    /// The row holds `chosen:<p>` cells (the layout before `chosen_last`).
    pub chosen_cells: bool,
    /// `visible`.
    pub visible: Position,
    /// `applied`.
    pub applied: Position,
    /// `truncated`.
    pub truncated: Position,
    /// `installed`.
    pub installed: Position,
    /// `collected`.
    pub collected: Position,
    /// `rejoin_floor`, if this replica rejoined after a wipe and cleared the group.
    pub rejoin_floor: Option<Position>,
}

impl StoredGroup {
    /// Reads the state out of a root row (absent row: a group never written here).
    pub fn from_row(row: Option<&Row>) -> Result<StoredGroup, CellError> {
        let mut stored = StoredGroup::default();
        let Some(row) = row else { return Ok(stored) };
        for (name, cell) in &row.cells {
            let value = cell.value.as_slice();
            let position = |family: &[u8]| -> Result<Position, CellError> {
                let bytes: [u8; 8] = name[family.len()..].try_into().map_err(|_| CellError {
                    column: name.escape_ascii().to_string(),
                    detail: "position is not 8 bytes".into(),
                })?;
                Ok(Position(u64::from_be_bytes(bytes)))
            };
            if name.starts_with(PROMISE) {
                stored
                    .promises
                    .push((position(PROMISE)?, decode(name, value)?));
            } else if name.starts_with(LOG) {
                stored.slots.push((position(LOG)?, decode(name, value)?));
            } else if name.starts_with(GRANT) {
                stored.grants.push((position(GRANT)?, decode(name, value)?));
            } else if name.starts_with(CHOSEN) {
                stored
                    .chosen
                    .push((position(CHOSEN)?, decode(name, value)?));
                stored.chosen_cells = true;
            } else if name == CHOSEN_LAST {
                let last: Vec<(Position, ChosenTxn)> = decode(name, value)?;
                stored.chosen.extend(last);
            } else if name == VISIBLE {
                stored.visible = decode(name, value)?;
            } else if name == APPLIED {
                stored.applied = decode(name, value)?;
            } else if name == TRUNCATED {
                stored.truncated = decode(name, value)?;
            } else if name == INSTALLED {
                stored.installed = decode(name, value)?;
            } else if name == COLLECTED {
                stored.collected = decode(name, value)?;
            } else if name == REJOIN_FLOOR {
                stored.rejoin_floor = Some(decode(name, value)?);
            }
        }
        stored.visible = stored_visible(stored.visible, stored.applied);
        let visible = stored.visible;
        for (p, slot) in &mut stored.slots {
            slot.derive_visible(*p, visible);
        }
        Ok(stored)
    }
}

/// Builds root-row mutations.
#[derive(Debug, Clone)]
pub struct RootRowWrite(pub RowMutation);

impl RootRowWrite {
    /// A mutation of `root_row`.
    pub fn new(root_row: Vec<u8>) -> Self {
        Self(RowMutation::new(root_row))
    }

    /// Records a promise.
    pub fn promise(mut self, p: Position, ballot: Ballot) -> Self {
        self.0 = self.0.set(promise_column(p), CELL_TS, encode(&ballot));
        self
    }

    /// Records an accepted (or visible) slot.
    pub fn slot(mut self, p: Position, slot: &SlotRecord) -> Self {
        self.0 = self.0.set(log_column(p), CELL_TS, encode(slot));
        self
    }

    /// Sets a watermark column.
    pub fn watermark(mut self, column: &[u8], p: Position) -> Self {
        self.0 = self.0.set(column.to_vec(), CELL_TS, encode(&p));
        self
    }

    /// Remembers what was chosen at the last truncated positions: every record, in
    /// one cell (a truncation spans many positions; a cell per position made their
    /// records and the deletions of the ones pushed out a third of a commit's store
    /// writes while truncation kept pace).
    pub fn chosen_last<'a>(
        mut self,
        chosen: impl IntoIterator<Item = (&'a Position, &'a ChosenTxn)>,
    ) -> Self {
        let records: Vec<(&Position, &ChosenTxn)> = chosen.into_iter().collect();
        self.0 = self.0.set(CHOSEN_LAST.to_vec(), CELL_TS, encode(&records));
        self
    }

    /// Deletes every `chosen:<p>` cell (the layout before `chosen_last`) in one range
    /// deletion.
    pub fn forget_chosen_cells(mut self) -> Self {
        self.0 = self.0.delete_columns(KeyRange::prefix(CHOSEN));
        self
    }

    /// Deletes every `grant:<p>` cell (the layout before grants lived in memory) in one
    /// range deletion.
    pub fn forget_grant_cells(mut self) -> Self {
        self.0 = self.0.delete_columns(KeyRange::prefix(GRANT));
        self
    }

    /// Removes every cell of position `p`, held or not.
    pub fn forget(self, p: Position) -> Self {
        self.forget_slot(p).forget_promise(p)
    }

    /// Removes the `log:<p>` cell (truncation).
    pub fn forget_slot(mut self, p: Position) -> Self {
        self.0 = self.0.delete_cell(log_column(p), CELL_TS);
        self
    }

    /// Removes the `log:<p>` cells of `from` through `through` (truncation: one range
    /// deletion however many positions it spans).
    pub fn forget_slots(mut self, from: Position, through: Position) -> Self {
        self.0 = self.0.delete_columns(KeyRange::between(
            log_column(from),
            just_after(&log_column(through)),
        ));
        self
    }

    /// Removes the `promise:<p>` cell (truncation).
    pub fn forget_promise(mut self, p: Position) -> Self {
        self.0 = self.0.delete_cell(promise_column(p), CELL_TS);
        self
    }
}
