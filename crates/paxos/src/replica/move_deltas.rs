//! A short freeze (docs/protocol.md, "A short freeze"): a move's final copy copies only
//! the groups its source changed since the bulk copy began, not the whole range, so
//! the freeze no longer grows with the range's size. Both sides live in the replica
//! core, so the replica server and the simulator keep one rule:
//!
//! - The **source** tracks, per range moving away from it, the groups whose state any
//!   of its steps wrote ([`Replica::page_token`] begins it at the first page of a bulk
//!   copy it exports; each page carries the [`ChangeToken`] it was exported under). A
//!   new process tracks nothing, and too many changed groups end the tracking: the
//!   next bulk copy begins a new token.
//! - The **target** keeps, per range it receives, the token each page applied came
//!   under. A bulk copy whose pages, and every page applied since its first, came
//!   under one token is a *base* for that token.
//!
//! Invariant *delta-on-a-clean-base*: a final copy copies only the changed groups when
//! the target has a base under token `T` and the source — frozen for the move, its
//! store kept (`Replica::final_copy_source`) — still tracks `T`. Then every row of the
//! range at the target was written by a page exported after `T` began, so a group
//! unchanged since holds at the target what the frozen source holds, and each changed
//! group is copied whole (its rows, its registry rows and the global rows its mirrors
//! name, as any copy copies a group). In any other case the final copy is the whole
//! range, as before.

use std::collections::{BTreeMap, BTreeSet};

use megastore_placement::{RangeId, Version};
use megastore_rowstore::{Durability, ExportedPage, KeyRange, RowRead, RowStore};
use megastore_types::EgId;

use super::placed::span_keys;
use super::range_copy::RangeCopy;
use super::registry::GroupList;
use super::{Output, Replica};
use crate::entry::group_of_root_row;
use megastore_placement::FinalCopyRefused;

/// Changed groups a source tracks per range at most: past it, the tracking ends and a
/// final copy copies the whole range (a copy of that many groups is no short freeze).
pub const CHANGED_GROUPS_MAX: usize = 8_192;

/// Which tracking of a source's changes a page was exported under: chosen by the
/// source's host at random when the tracking begins (never 0), so that no other
/// tracking (of another process, or begun again) has it. A host that gave two
/// trackings one token would let a target's base from the first pass for the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeToken(pub u64);

/// A source's tracking of one range moving away from it.
#[derive(Debug, Clone)]
struct Tracking {
    move_id: Version,
    keys: KeyRange,
    token: ChangeToken,
    /// `None`: more than [`CHANGED_GROUPS_MAX`] changed; the tracking has ended.
    changed: Option<BTreeSet<EgId>>,
}

/// A target's record of the pages it applied of one range it receives.
#[derive(Debug, Clone)]
struct Receipt {
    move_id: Version,
    /// Pages applied so far.
    pages: u64,
    /// The token of the last page applied (`None`: exported under none).
    token: Option<ChangeToken>,
    /// The first page of the run of pages under `token` that ends with the last one.
    same_token_from: u64,
    /// The token of a completed bulk copy every page since whose first came under it.
    base: Option<ChangeToken>,
}

/// Where a copy began in its target's receipt of the range: the pages applied before
/// its first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyMark {
    range: RangeId,
    move_id: Version,
    pages_before: u64,
    /// A bulk copy (not the final one): its completion may make a base.
    bulk: bool,
}

/// Both sides' records, kept in memory only: a process that restarts tracks nothing
/// and holds no base, so its next final copy is of the whole range.
#[derive(Debug, Default)]
pub(super) struct MoveDeltas {
    tracking: BTreeMap<RangeId, Tracking>,
    receipts: BTreeMap<RangeId, Receipt>,
}

impl MoveDeltas {
    /// Notes that `eg`'s state was written.
    fn changed(&mut self, eg: &[u8]) {
        for tracking in self.tracking.values_mut() {
            let Some(changed) = &mut tracking.changed else {
                continue;
            };
            if !tracking.keys.contains(eg) {
                continue;
            }
            changed.insert(EgId(eg.to_vec()));
            if changed.len() > CHANGED_GROUPS_MAX {
                tracking.changed = None;
            }
        }
    }

    fn page_applied(&mut self, range: RangeId, move_id: Version, token: Option<ChangeToken>) {
        let receipt = self.receipt(range, move_id);
        receipt.pages += 1;
        if receipt.token != token {
            receipt.token = token;
            receipt.same_token_from = receipt.pages;
            receipt.base = None;
        }
    }

    fn receipt(&mut self, range: RangeId, move_id: Version) -> &mut Receipt {
        let fresh = Receipt {
            move_id,
            pages: 0,
            token: None,
            same_token_from: 0,
            base: None,
        };
        let receipt = self.receipts.entry(range).or_insert_with(|| fresh.clone());
        if receipt.move_id != move_id {
            *receipt = fresh;
        }
        receipt
    }
}

impl Replica {
    /// The token a page of `range` this source exports for `move_id` goes under:
    /// for a bulk copy's page (`last` false) the tracking of the range's changes,
    /// begun now with `nonce` unless it runs already for the move; for a final copy's
    /// page, the tracking under way if any. Called once the host checked that the
    /// source gives the page (`ServerPlacement::moving_away`, and for a final page
    /// `Replica::final_copy_source`), before it reads the page from the store.
    pub fn page_token(
        &mut self,
        range: RangeId,
        move_id: Version,
        last: bool,
        nonce: u64,
    ) -> Option<ChangeToken> {
        let forget_earlier = self.config.bugs.track_changes_per_page();
        let under_way = self
            .deltas
            .tracking
            .get_mut(&range)
            .filter(|t| t.move_id == move_id)
            .and_then(|t| {
                let changed = t.changed.as_mut()?;
                if forget_earlier && !last {
                    changed.clear();
                }
                Some(t.token)
            });
        if last || under_way.is_some() {
            return under_way;
        }
        let moving = self.placement.as_ref()?.view().range(range)?;
        let keys = KeyRange {
            start: moving.start.clone(),
            end: moving.end.clone(),
        };
        // Never 0, which the wire reads as "no token".
        let token = ChangeToken(nonce.max(1));
        self.deltas.tracking.insert(
            range,
            Tracking {
                move_id,
                keys,
                token,
                changed: Some(BTreeSet::new()),
            },
        );
        Some(token)
    }

    /// The groups of `range` this source changed since its tracking `token` began,
    /// for the final copy of `move_id`: refused unless it gives the final copy at all
    /// (`Replica::final_copy_source`); `None` if it does not track the range under
    /// `token` (a new process, tracking begun again, too many changed) — then the
    /// final copy is of the whole range.
    pub fn changed_groups(
        &self,
        range: RangeId,
        move_id: Version,
        token: ChangeToken,
    ) -> Result<Option<Vec<EgId>>, FinalCopyRefused> {
        self.final_copy_source(range, move_id)?;
        Ok(self
            .deltas
            .tracking
            .get(&range)
            .filter(|t| t.move_id == move_id && t.token == token)
            .and_then(|t| t.changed.as_ref())
            .map(|changed| changed.iter().cloned().collect()))
    }

    /// The token under which this target holds a clean base of `range` for
    /// `move_id` (*delta-on-a-clean-base*): the one to ask the source's changes since.
    pub fn copy_base(&self, range: RangeId, move_id: Version) -> Option<ChangeToken> {
        self.deltas
            .receipts
            .get(&range)
            .filter(|r| r.move_id == move_id)
            .and_then(|r| r.base)
    }

    /// Begins a copy of `range` into this server for `move_id` to it: the whole range,
    /// or — a final copy given the source's `changed` groups since this target's base
    /// — those groups only. Refused, in words, unless this server's placement shows
    /// the move to it.
    pub fn begin_copy<T: RowRead>(
        &mut self,
        store: &T,
        range: RangeId,
        move_id: Version,
        last: bool,
        changed: Option<&[EgId]>,
    ) -> Result<RangeCopy, String> {
        let keys = self.receiving(range, move_id)?;
        let groups = match changed {
            Some(changed) if last => changed
                .iter()
                .filter_map(|eg| KeyRange::prefix(eg.0.clone()).intersection(&keys))
                .collect(),
            _ => vec![keys],
        };
        let pages_before = self.deltas.receipt(range, move_id).pages;
        let mark = CopyMark {
            range,
            move_id,
            pages_before,
            bulk: !last,
        };
        RangeCopy::of_groups(store, groups, Some(mark))
            .map_err(|e| format!("reading this server's store: {e}"))
    }

    /// Applies `page`, exported by the source under `token`, to `copy` (begun by
    /// [`Replica::begin_copy`]) in this server's `store`; a bulk copy that ends on it
    /// under one token with no other page in between becomes the range's base.
    pub fn apply_copied_page<T: RowStore>(
        &mut self,
        store: &T,
        copy: &mut RangeCopy,
        page: &ExportedPage,
        token: Option<ChangeToken>,
        page_rows: usize,
        durability: Durability,
    ) -> Result<(), String> {
        let Some(mark) = copy.mark() else {
            return Err("the copy was not begun by this server's replica".into());
        };
        self.receiving(mark.range, mark.move_id)?;
        copy.apply(store, page, page_rows, durability)
            .map_err(|e| format!("writing this server's store: {e}"))?;
        self.deltas.page_applied(mark.range, mark.move_id, token);
        let receipt = self.deltas.receipt(mark.range, mark.move_id);
        let clean = receipt.same_token_from <= mark.pages_before + 1
            || self.config.bugs.delta_on_any_base();
        if copy.is_done() && mark.bulk && clean {
            receipt.base = receipt.token;
        }
        Ok(())
    }

    /// The keys of `range` if this server takes a copy of it for `move_id`.
    fn receiving(&self, range: RangeId, move_id: Version) -> Result<KeyRange, String> {
        let placement = self
            .placement
            .as_ref()
            .ok_or("this server is not placed: it follows no placement")?;
        placement
            .receive(range, move_id)
            .map(span_keys)
            .map_err(|e| format!("{e} to this server"))
    }

    /// Notes the groups whose state this step's `out` writes, for the ranges whose
    /// changes this source tracks.
    pub(super) fn note_move_changes(&mut self, out: &[Output]) {
        if self.deltas.tracking.is_empty() {
            return;
        }
        for output in out {
            let eg: Option<&[u8]> = match output {
                Output::Persist { mutation } => group_of_root_row(&mutation.row),
                Output::Index { mutation } => GroupList::group_of_row(&mutation.row),
                Output::Apply { eg, .. }
                | Output::Install { eg, .. }
                | Output::CollectGarbage { eg, .. } => Some(&eg.0[..]),
                _ => None,
            };
            if let Some(eg) = eg {
                self.deltas.changed(eg);
            }
        }
    }

    /// Drops the records of moves this server's placement no longer shows.
    pub(super) fn forget_ended_moves(&mut self) {
        let Some(placement) = &self.placement else {
            return;
        };
        self.deltas
            .tracking
            .retain(|range, t| placement.moving_away(*range, t.move_id).is_ok());
        self.deltas
            .receipts
            .retain(|range, r| placement.receive(*range, r.move_id).is_ok());
    }
}
