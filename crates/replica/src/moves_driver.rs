//! A move's copies and freeze at a replica server (docs/protocol.md, "Placement"), the
//! driver thread's side: what `Admin.ExportPage`, `Admin.ChangedGroups`,
//! `Admin.Freeze` and `Admin.CopyRange` ask of the core and the store. Every decision
//! is the cores': whether this server gives a page (`ServerPlacement::moving_away`, and
//! `Replica::final_copy_source` for the final copy), whether it takes one
//! (`ServerPlacement::receive`), what a copy copies (`Replica::begin_copy`: the whole
//! range, or for a short final copy the groups changed since the bulk copy), which
//! token a page goes under (`Replica::page_token`). The driver runs these between its
//! batches, after the batch before is synced: an exported page holds every write
//! acknowledged before it, a change after it is tracked, and a page applied never
//! interleaves with a retirement of the same range.

use megastore_paxos::{ChangeToken, RangeCopy, Replica, export_pages};
use megastore_placement::{FinalCopyRefused, RangeId, Version};
use megastore_rowstore::{Durability, ExportedPage, KeyRange, RowStore};
use megastore_rowstore_rocksdb::RocksStore;
use megastore_types::EgId;
use tokio::sync::oneshot;

/// Rows a page holds when the caller does not say.
pub(crate) const PAGE_ROWS_DEFAULT: usize = 64;
/// Rows a page holds at most.
pub(crate) const PAGE_ROWS_MAX: usize = 1_024;

/// Pages of a move's copy, with the tracking of changes they were exported under.
pub(crate) type Pages = (Vec<ExportedPage>, Option<ChangeToken>);

/// A move's step the driver carries out between batches.
pub(crate) enum MoveEvent {
    /// Pages of this server's rows in `spans` (in order: a page of each while the
    /// answer has room, `rows` in all), for move `move_id` of `range` away from it;
    /// `last`: of the final copy.
    Export {
        range: RangeId,
        move_id: Version,
        last: bool,
        spans: Vec<KeyRange>,
        rows: usize,
        reply: oneshot::Sender<Result<Pages, ExportRefused>>,
    },
    /// The groups of `range` this source changed since its tracking `token` began
    /// (`Replica::changed_groups`).
    Changed {
        range: RangeId,
        move_id: Version,
        token: ChangeToken,
        reply: oneshot::Sender<Result<Option<Vec<EgId>>, FinalCopyRefused>>,
    },
    /// Whether `range` is frozen for `move_id` here (asked after the freeze's batch
    /// is synced).
    Frozen {
        range: RangeId,
        move_id: Version,
        reply: oneshot::Sender<bool>,
    },
    /// The token under which this target holds a clean base of `range` for the move.
    Base {
        range: RangeId,
        move_id: Version,
        reply: oneshot::Sender<Option<ChangeToken>>,
    },
    /// Begin a copy of `range` into this server for move `move_id` to it: of the
    /// `changed` groups only, for a final copy given them.
    BeginCopy {
        range: RangeId,
        move_id: Version,
        last: bool,
        changed: Option<Vec<EgId>>,
        reply: oneshot::Sender<Result<RangeCopy, String>>,
    },
    /// Apply `pages` (the source's export of `copy`'s next spans, under `token`) to
    /// this server's store.
    ApplyPages {
        copy: Box<RangeCopy>,
        pages: Vec<ExportedPage>,
        token: Option<ChangeToken>,
        reply: oneshot::Sender<Result<Box<RangeCopy>, String>>,
    },
}

/// Carries out `event` against the core and the store (the batch before it synced).
pub(crate) fn carry_out(core: &mut Replica, store: &RocksStore, event: MoveEvent) {
    match event {
        MoveEvent::Export {
            range,
            move_id,
            last,
            spans,
            rows,
            reply,
        } => {
            let _ = reply.send(export(core, store, range, move_id, last, &spans, rows));
        }
        MoveEvent::Changed {
            range,
            move_id,
            token,
            reply,
        } => {
            let _ = reply.send(core.changed_groups(range, move_id, token));
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
        MoveEvent::Base {
            range,
            move_id,
            reply,
        } => {
            let _ = reply.send(core.copy_base(range, move_id));
        }
        MoveEvent::BeginCopy {
            range,
            move_id,
            last,
            changed,
            reply,
        } => {
            let _ = reply.send(core.begin_copy(store, range, move_id, last, changed.as_deref()));
        }
        MoveEvent::ApplyPages {
            mut copy,
            pages,
            token,
            reply,
        } => {
            // One sync for the answer's pages, before the copy's progress is told: a
            // final copy reported done is durable.
            let applied = pages
                .iter()
                .try_for_each(|page| {
                    core.apply_copied_page(
                        store,
                        &mut copy,
                        page,
                        token,
                        PAGE_ROWS_MAX,
                        Durability::Buffered,
                    )
                })
                .and_then(|()| {
                    store
                        .sync()
                        .map_err(|e| format!("syncing this server's store: {e}"))
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
    core: &mut Replica,
    store: &RocksStore,
    range: RangeId,
    move_id: Version,
    last: bool,
    spans: &[KeyRange],
    rows: usize,
) -> Result<Pages, ExportRefused> {
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
    // Before the store is read: a change after it is tracked.
    let token = core.page_token(range, move_id, last, rand::random());
    let pages = export_pages(store, spans, rows.clamp(1, PAGE_ROWS_MAX))
        .map_err(|e| ExportRefused::Other(format!("reading this server's store: {e}")))?;
    Ok((pages, token))
}
