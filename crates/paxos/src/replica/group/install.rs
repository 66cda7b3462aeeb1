//! Snapshot install: a replica whose missing positions are truncated everywhere takes
//! another replica's data as of that replica's applied position.

use std::collections::{BTreeMap, BTreeSet};

use megastore_rowstore::{Mutation, Row, RowMutation};
use megastore_types::{Position, ReplicaKind};

use super::{GroupLog, Output, global_copies};
use crate::bugs::ProtocolBugs;
use crate::cells::{APPLIED, INSTALLED, SlotRecord, TRUNCATED, VISIBLE};

/// Another replica's snapshot of a group, to install: its data as of `at` and the
/// visible entry there.
#[derive(Debug, Clone)]
pub struct GroupSnapshot {
    /// The source's applied position.
    pub at: Position,
    /// The visible entry at `at` (so the leader of `at + 1` stays known).
    pub slot: SlotRecord,
    /// The data rows as of `at`.
    pub rows: Vec<Row>,
}

impl GroupLog {
    /// Whether an install needs the data this replica stores listed first
    /// ([`GroupLog::install`]'s `stored`): a full or read-only replica whose log was
    /// truncated no longer knows from its log every column it applied.
    pub fn install_needs_stored_data(&self, kind: ReplicaKind) -> bool {
        kind != ReplicaKind::Witness && self.truncated != Position::NONE
    }

    /// Installs the group from another replica's `snapshot` at `at` (`slot` is the
    /// visible entry there, `rows` the data as of `at`): the log below `at` counts as
    /// truncated, everything through `at` as visible and applied, and reads below `at`
    /// are refused from then on. Every cell is written at timestamp `at`, and every
    /// column this replica holds gets a tombstone at `at` first, so what it applied
    /// before and the snapshot does not hold is gone as of `at` (*install-replaces-data*).
    /// The columns it holds are those its log says it applied, and those of `stored`
    /// (the group's data rows as its store holds them): a replica whose log was
    /// truncated installs only with them ([`GroupLog::install_needs_stored_data`]); a
    /// witness keeps no data. Returns whether it installed.
    pub fn install(
        &mut self,
        kind: ReplicaKind,
        snapshot: GroupSnapshot,
        stored: Option<&[Row]>,
        bugs: &ProtocolBugs,
        out: &mut Vec<Output>,
    ) -> bool {
        let GroupSnapshot { at, slot, rows } = snapshot;
        let witness = kind == ReplicaKind::Witness;
        let knows_its_data = !self.install_needs_stored_data(kind) || stored.is_some();
        if at <= self.visible || !slot.visible || !knows_its_data {
            return false;
        }
        let stored = stored.filter(|_| !bugs.install_forgets_stored_columns());
        let data = if witness {
            Vec::new()
        } else {
            self.data_as_of(at, rows, stored.unwrap_or_default())
        };
        let mut write = self.write();
        let stale: BTreeSet<Position> = self
            .slots
            .range(..=at)
            .map(|(p, _)| *p)
            .chain(self.promises.range(..=at).map(|(p, _)| *p))
            .chain(self.grants.range(..=at).map(|(p, _)| *p))
            .collect();
        for p in stale {
            self.slots.remove(&p);
            self.promises.remove(&p);
            self.grants.remove(&p);
            write = write.forget(p);
        }
        write = write.slot(at, &slot);
        self.slots.insert(at, Box::new(slot));
        self.truncated = at.prev();
        self.installed = at;
        self.visible = at;
        while self
            .slots
            .get(&self.visible.next())
            .is_some_and(|s| s.visible)
        {
            self.visible = self.visible.next();
        }
        write = write
            .watermark(VISIBLE, self.visible)
            .watermark(TRUNCATED, self.truncated)
            .watermark(INSTALLED, at);
        if !witness {
            self.applied = at;
            write = write.watermark(APPLIED, at);
        }
        self.prepared.note(&self.eg, at, &data);
        let global = global_copies(&self.eg, &data);
        let mut batch = data;
        batch.push(write.0);
        out.push(Output::Install {
            eg: self.eg.clone(),
            global,
            rows: batch,
        });
        if !witness {
            self.apply_ready(out);
        }
        true
    }

    /// The data mutations of an install at `at`: tombstones for every column this
    /// replica applied by its log and every column of `stored`, then the snapshot's
    /// cells, all at `at`, one mutation per row.
    fn data_as_of(&self, at: Position, rows: Vec<Row>, stored: &[Row]) -> Vec<RowMutation> {
        let mut by_row: BTreeMap<Vec<u8>, RowMutation> = BTreeMap::new();
        let tombstone = |column: &[u8]| Mutation::DeleteColumn {
            column: column.to_vec(),
            timestamp: at.0,
        };
        let applied_here = self
            .slots
            .range(..=self.applied)
            .flat_map(|(_, s)| &s.entry.writes);
        for write in applied_here {
            let mutations = mutations_of(&mut by_row, &write.row);
            mutations.extend(write.cells.iter().map(|cell| tombstone(cell.column())));
        }
        for row in stored {
            let mutations = mutations_of(&mut by_row, &row.key);
            mutations.extend(row.cells.keys().map(|column| tombstone(column)));
        }
        for snapshot_row in rows {
            let mutations = mutations_of(&mut by_row, &snapshot_row.key);
            mutations.extend(
                snapshot_row
                    .cells
                    .into_iter()
                    .map(|(column, cell)| Mutation::Set {
                        column,
                        timestamp: at.0,
                        value: cell.value,
                    }),
            );
        }
        by_row.into_values().collect()
    }
}

fn mutations_of<'a>(
    by_row: &'a mut BTreeMap<Vec<u8>, RowMutation>,
    key: &[u8],
) -> &'a mut Vec<Mutation> {
    &mut by_row
        .entry(key.to_vec())
        .or_insert_with(|| RowMutation::new(key.to_vec()))
        .mutations
}
