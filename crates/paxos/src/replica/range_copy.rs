//! Copying a range's group state to another server's store, a page at a time
//! (docs/protocol.md, "Placement"): what a move's copies are. [`RangeCopy`] is the
//! target's side — which span the source exports next, and applying each exported
//! page — so a copy between processes is a page request to the source's
//! [`export_page`] and an [`RangeCopy::apply`] at the target, resumable after any
//! page; [`copy_range`] runs it to the end between two stores in one process.
//!
//! What is copied, in this order: every global index row the groups' mirrors name at
//! the target before the copy (rows an older copy named, which the source may no
//! longer have: removed unless it has them), every span of [`group_state_spans`], and
//! every global index row the mirrors name at the target after it (the source's). So
//! the target's global index is the source's for the range. The first rows go first
//! so that a copy begun again after an interrupted one still finds them: the mirrors
//! naming them are only replaced by the spans that follow.
//!
//! Exact if the source does not change during the copy (a frozen source, or a
//! snapshot); otherwise each page is of its own moment, and a copy from the frozen
//! source makes it exact.

use std::collections::VecDeque;

use megastore_rowstore::{
    CopyStats, Durability, ExportedPage, KeyRange, RowRead, RowStore, RowStoreError, export_page,
    import_page,
};

use super::range_state::{group_state_spans, mirrored_global_rows};

/// A copy of the state of the groups in a range of group keys into one target store,
/// under way.
#[derive(Debug, Clone)]
pub struct RangeCopy {
    groups: KeyRange,
    /// What is left to copy, in order: the rest of the current span first.
    pending: VecDeque<KeyRange>,
    /// The global rows the target's mirrors name once the group spans are copied are
    /// still to be queued.
    globals_after: bool,
    stats: CopyStats,
}

impl RangeCopy {
    /// A copy of the groups in `groups` into the store `to`.
    pub fn new<T: RowRead>(to: &T, groups: &KeyRange) -> Result<Self, RowStoreError> {
        let pending = mirrored_global_rows(to, groups)?
            .into_iter()
            .map(KeyRange::single)
            .chain(group_state_spans(groups))
            .collect();
        let mut copy = Self {
            groups: groups.clone(),
            pending,
            globals_after: true,
            stats: CopyStats::default(),
        };
        copy.queue_globals_when_spans_are_done(to)?;
        Ok(copy)
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
    /// name now (the source's).
    fn queue_globals_when_spans_are_done<T: RowRead>(
        &mut self,
        to: &T,
    ) -> Result<(), RowStoreError> {
        if self.pending.is_empty() && self.globals_after {
            self.globals_after = false;
            let globals = mirrored_global_rows(to, &self.groups)?;
            self.pending
                .extend(globals.into_iter().map(KeyRange::single));
        }
        Ok(())
    }
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
