//! Copying a range's group state to another server's store, a page at a time
//! (docs/protocol.md, "Placement"): what a move's copies are. [`RangeCopy`] is the
//! target's side — which spans the source exports next, and applying each exported
//! page — so a copy between processes is a request to the source's [`export_pages`]
//! (a page of each of several spans in one answer) and a [`RangeCopy::apply`] of each
//! page at the target, resumable after any page; [`copy_range`] runs it to the end
//! between two stores in one process. A copy may be of several ranges of group keys
//! at once: a short final copy is of the groups the source changed since the bulk
//! copy (`super::move_deltas`).
//!
//! What is copied, in this order: every global index row the groups' mirrors name at
//! the target before the copy (rows an older copy named, which the source may no
//! longer have: removed unless it has them), every span of [`group_state_spans`], and
//! every global index row the mirrors name at the target after it (the source's),
//! together with the first step's rows again. So the target's global index is the
//! source's for the range. The first rows go first so that a copy begun again after an
//! interrupted one still finds them: the mirrors naming them are only replaced by the
//! spans that follow. They go last again because the source may have dropped them
//! while the spans were copied (a group's entry changed, or the source lost its store
//! and answers from an empty one): the spans then replace the mirrors that named them,
//! and a row no mirror names would outlive every later copy and retirement, which find
//! global rows through the mirrors (*copied-globals-resynced*).
//!
//! Exact if the source does not change during the copy (a frozen source, or a
//! snapshot); otherwise each page is of its own moment, and a copy from the frozen
//! source makes it exact.

use std::collections::{BTreeSet, VecDeque};

use megastore_rowstore::{
    CopyStats, Durability, ExportedPage, KeyRange, PAGE_BYTES_TARGET, RowRead, RowStore,
    RowStoreError, export_page, import_page,
};

use super::move_deltas::CopyMark;
use super::range_state::{group_state_spans, mirrored_global_rows};

/// A copy of the state of the groups in ranges of group keys into one target store,
/// under way.
#[derive(Debug, Clone)]
pub struct RangeCopy {
    /// Ranges of group keys, disjoint.
    groups: Vec<KeyRange>,
    /// What is left to copy, in order: the rest of the current span first.
    pending: VecDeque<KeyRange>,
    /// The global rows the target's mirrors name once the group spans are copied are
    /// still to be queued.
    globals_after: bool,
    /// The global rows the target's mirrors named before the copy (its first step):
    /// copied again with the last step's.
    globals_before: BTreeSet<Vec<u8>>,
    stats: CopyStats,
    /// Where a move's copy began in its target's receipt (`Replica::begin_copy`).
    mark: Option<CopyMark>,
}

impl RangeCopy {
    /// A copy of the groups in `groups` into the store `to`.
    pub fn new<T: RowRead>(to: &T, groups: &KeyRange) -> Result<Self, RowStoreError> {
        Self::of_groups(to, vec![groups.clone()], None)
    }

    /// A copy of the groups in each of `groups` (disjoint ranges of group keys) into
    /// the store `to`, for the move `mark` names if any.
    pub(super) fn of_groups<T: RowRead>(
        to: &T,
        groups: Vec<KeyRange>,
        mark: Option<CopyMark>,
    ) -> Result<Self, RowStoreError> {
        let mut globals_before = BTreeSet::new();
        for range in &groups {
            globals_before.extend(mirrored_global_rows(to, range)?);
        }
        let mut pending: VecDeque<KeyRange> = globals_before
            .iter()
            .cloned()
            .map(KeyRange::single)
            .collect();
        pending.extend(groups.iter().flat_map(group_state_spans));
        let mut copy = Self {
            groups,
            pending,
            globals_after: true,
            globals_before,
            stats: CopyStats::default(),
            mark,
        };
        copy.queue_globals_when_spans_are_done(to)?;
        Ok(copy)
    }

    /// Where the copy began in its target's receipt of the range, if it is a move's.
    pub fn mark(&self) -> Option<CopyMark> {
        self.mark
    }

    /// The spans whose next pages the source may export in one answer, in order (at
    /// most `most`): the first is [`RangeCopy::next_span`]. The pages are applied in
    /// the same order, each to the span then first; a page that leaves its span
    /// unfinished ends the answer ([`export_pages`]).
    pub fn next_spans(&self, most: usize) -> impl Iterator<Item = &KeyRange> {
        self.pending.iter().take(most.max(1))
    }

    /// The span whose next page the source exports ([`export_page`]); `None`: the copy
    /// is done.
    pub fn next_span(&self) -> Option<&KeyRange> {
        self.pending.front()
    }

    /// Whether everything is copied.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }

    /// What the copy did so far.
    pub fn stats(&self) -> CopyStats {
        self.stats
    }

    /// Applies `page`, the source's export of [`RangeCopy::next_span`], to the target
    /// store `to` (reading at most `page_rows` of its rows at a time, writing with
    /// `durability`), and moves on.
    pub fn apply<T: RowStore>(
        &mut self,
        to: &T,
        page: &ExportedPage,
        page_rows: usize,
        durability: Durability,
    ) -> Result<(), RowStoreError> {
        let Some(span) = self.pending.front_mut() else {
            return Ok(());
        };
        self.stats += import_page(to, span, page, page_rows, durability)?;
        match &page.next {
            Some(next) => span.start = next.clone(),
            None => {
                self.pending.pop_front();
            }
        }
        self.queue_globals_when_spans_are_done(to)
    }

    /// Once the group spans are copied: queues the global rows the target's mirrors
    /// name now (the source's), and the first step's again.
    fn queue_globals_when_spans_are_done<T: RowRead>(
        &mut self,
        to: &T,
    ) -> Result<(), RowStoreError> {
        if self.pending.is_empty() && self.globals_after {
            self.globals_after = false;
            let mut globals = std::mem::take(&mut self.globals_before);
            for range in &self.groups {
                globals.extend(mirrored_global_rows(to, range)?);
            }
            self.pending
                .extend(globals.into_iter().map(KeyRange::single));
        }
        Ok(())
    }
}

/// The pages of `spans` (in order: a copy's [`RangeCopy::next_spans`]) one answer of a
/// source holds: a page of each span in turn, while fewer than `rows` rows are taken,
/// ending with the first page that leaves its span unfinished. At least one page.
pub fn export_pages<'a, F: RowRead>(
    from: &F,
    spans: impl IntoIterator<Item = &'a KeyRange>,
    rows: usize,
) -> Result<Vec<ExportedPage>, RowStoreError> {
    let mut pages = Vec::new();
    let mut left = rows.max(1);
    let mut bytes = 0;
    for span in spans {
        if left == 0 || bytes >= PAGE_BYTES_TARGET {
            break;
        }
        let page = export_page(from, span, left)?;
        left = left.saturating_sub(page.rows.len());
        bytes += page.rows.iter().map(|r| r.stored_bytes()).sum::<usize>();
        let unfinished = page.next.is_some();
        pages.push(page);
        if unfinished {
            break;
        }
    }
    Ok(pages)
}

/// Makes `to`'s state of the groups in `groups` exactly `from`'s: every span of
/// [`group_state_spans`], and every global index row the mirrors of those groups name
/// at either store (a row only the target's older copy names is removed). Pages of
/// `page_rows` rows, each written with `durability`. Exact if `from` does not change
/// meanwhile (a frozen source, or a snapshot); otherwise run again once it does not.
pub fn copy_range<F: RowRead, T: RowStore>(
    from: &F,
    to: &T,
    groups: &KeyRange,
    page_rows: usize,
    durability: Durability,
) -> Result<CopyStats, RowStoreError> {
    let mut copy = RangeCopy::new(to, groups)?;
    while let Some(span) = copy.next_span() {
        let page = export_page(from, span, page_rows)?;
        copy.apply(to, &page, page_rows, durability)?;
    }
    Ok(copy.stats())
}
