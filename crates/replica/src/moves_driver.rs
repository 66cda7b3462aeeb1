//! A move's copies and freeze at a replica server (docs/protocol.md, "Placement"), the
//! driver thread's side: what `Admin.ExportPage`, `Admin.Freeze` and `Admin.CopyRange`
//! ask of the core and the store. Every decision is the cores': whether this server
//! gives a page (`ServerPlacement::moving_away`, and `Replica::final_copy_source` for
//! the final copy), whether it takes one (`ServerPlacement::receive`), what a copy
//! copies (`RangeCopy`). The driver runs these between its batches, after the batch
//! before is synced: an exported page holds every write acknowledged before it, and a
//! page applied never interleaves with a retirement of the same range.

use megastore_paxos::{RangeCopy, Replica, span_keys};
use megastore_placement::{FinalCopyRefused, RangeId, Version};
use megastore_rowstore::{Durability, ExportedPage, KeyRange, export_page};
use megastore_rowstore_rocksdb::RocksStore;
use tokio::sync::oneshot;

/// Rows a page holds when the caller does not say.
pub(crate) const PAGE_ROWS_DEFAULT: usize = 64;
/// Rows a page holds at most.
pub(crate) const PAGE_ROWS_MAX: usize = 1_024;

/// A move's step the driver carries out between batches.
pub(crate) enum MoveEvent {
    /// One page of this server's rows in `span`, for move `move_id` of `range` away
    /// from it; `last`: of the final copy.
    Export {
        range: RangeId,
        move_id: Version,
        last: bool,
        span: KeyRange,
        rows: usize,
        reply: oneshot::Sender<Result<ExportedPage, ExportRefused>>,
    },
    /// Whether `range` is frozen for `move_id` here (asked after the freeze's batch
    /// is synced).
    Frozen {
        range: RangeId,
        move_id: Version,
        reply: oneshot::Sender<bool>,
    },
    /// Begin a copy of `range` into this server for move `move_id` to it.
    BeginCopy {
        range: RangeId,
        move_id: Version,
        reply: oneshot::Sender<Result<RangeCopy, String>>,
    },
    /// Apply `page` (the source's export of `copy`'s next span) to this server's store.
    ApplyPage {
        range: RangeId,
        move_id: Version,
        copy: Box<RangeCopy>,
        page: ExportedPage,
        reply: oneshot::Sender<Result<Box<RangeCopy>, String>>,
    },
}

/// Carries out `event` against the core and the store (the batch before it synced).
pub(crate) fn carry_out(core: &Replica, store: &RocksStore, event: MoveEvent) {
    match event {
        MoveEvent::Export {
            range,
            move_id,
            last,
            span,
            rows,
            reply,
        } => {
            let _ = reply.send(export(core, store, range, move_id, last, &span, rows));
        }
        MoveEvent::Frozen {
            range,
            move_id,
            reply,
        } => {
            let frozen = core
                .placement()
                .is_some_and(|p| p.frozen_for(range, move_id));
            let _ = reply.send(frozen);
        }
        MoveEvent::BeginCopy {
            range,
            move_id,
            reply,
        } => {
            let begun = receiving(core, range, move_id).and_then(|span| {
                RangeCopy::new(store, &span)
                    .map_err(|e| format!("reading this server's store: {e}"))
            });
            let _ = reply.send(begun);
        }
        MoveEvent::ApplyPage {
            range,
            move_id,
            mut copy,
            page,
            reply,
        } => {
            let applied = receiving(core, range, move_id).and_then(|_| {
                copy.apply(store, &page, PAGE_ROWS_MAX, Durability::Synced)
                    .map_err(|e| format!("writing this server's store: {e}"))
            });
            let _ = reply.send(applied.map(|()| copy));
        }
    }
}

/// Why a source gives no page.
pub(crate) enum ExportRefused {
    /// The final copy, for the operator core to act on.
    FinalCopy(FinalCopyRefused),
    /// Anything else, said in words.
    Other(String),
}

fn export(
    core: &Replica,
    store: &RocksStore,
    range: RangeId,
    move_id: Version,
    last: bool,
    span: &KeyRange,
    rows: usize,
) -> Result<ExportedPage, ExportRefused> {
    let placement = core.placement().ok_or_else(|| {
        ExportRefused::Other("this server is not placed: it follows no placement".into())
    })?;
    placement
        .moving_away(range, move_id)
        .map_err(|e| ExportRefused::Other(format!("{e} away from this server")))?;
    if last {
        core.final_copy_source(range, move_id)
            .map_err(ExportRefused::FinalCopy)?;
    }
    export_page(store, span, rows.clamp(1, PAGE_ROWS_MAX))
        .map_err(|e| ExportRefused::Other(format!("reading this server's store: {e}")))
}

/// The keys of `range` if this server takes a copy of it for `move_id`.
fn receiving(core: &Replica, range: RangeId, move_id: Version) -> Result<KeyRange, String> {
    let placement = core
        .placement()
        .ok_or("this server is not placed: it follows no placement")?;
    placement
        .receive(range, move_id)
        .map(span_keys)
        .map_err(|e| format!("{e} to this server"))
}
