//! Global index maintenance: the copies of a group's mirror writes to the global
//! index rows they name.
//!
//! A global index entry belongs to exactly one entity, hence one group, which keeps
//! the authoritative copy inside its own key range (its *mirror*,
//! [`crate::entry::global_mirror_range`]): written by its log entries, carried by its
//! snapshots, versioned at its positions. A full or read-only replica copies every
//! mirror mutation it applies or installs to the global row the mirror row names, at
//! the same timestamp. So at any replica a global index reflects each group as of the
//! position that replica applied of it (the paper's "global index scans may miss
//! recent updates"), and it is exactly what the mirrors hold once the replica has
//! applied everything — the simulator's `global-index` checker.
//!
//! A global row is read only at its newest version, so when the group truncates
//! entries, the versions they wrote to global rows are collected up to the truncation
//! point ([`super::Output::CollectGlobalGarbage`]), without the history floor the
//! group's own rows keep for reads at old positions.

use megastore_rowstore::RowMutation;
use megastore_types::EgId;

use crate::entry::mirrored_global_row;

/// The global index rows `rows` (mutations of `eg`'s rows) imply: one copy of each
/// mirror row's mutation, on the global row it names.
pub(crate) fn global_copies(eg: &EgId, rows: &[RowMutation]) -> Vec<RowMutation> {
    rows.iter()
        .filter_map(|m| {
            mirrored_global_row(eg, &m.row).map(|global| RowMutation {
                row: global.to_vec(),
                mutations: m.mutations.clone(),
            })
        })
        .collect()
}

/// The global index rows `entry` (of `eg`) writes through its mirror.
pub(crate) fn global_rows_of<'e>(
    eg: &'e EgId,
    entry: &'e crate::entry::LogEntry,
) -> impl Iterator<Item = Vec<u8>> + 'e {
    entry
        .writes
        .iter()
        .filter_map(move |w| mirrored_global_row(eg, &w.row).map(<[u8]>::to_vec))
}
