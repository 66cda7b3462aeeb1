//! Collecting a coordinator group's decision rows (docs/protocol.md, "Two-phase
//! commit", collection): a decision is needed only while some participant may still
//! meet the transaction's record, and by its client resolving a lost answer. So a row
//! older than the *decision retention* (counted from when its transaction began
//! preparing) whose transaction has no record left in any participant is deleted, by
//! a commit whose read set is the row and the group's collection watermark, which it
//! raises to the latest preparing time it collected. A record read absent never comes
//! back (a prepare is its transaction's entry, chosen at most once), and whoever later
//! reads the decision absent trusts that only above the watermark or with a record
//! read present after it (*absent-decision-confirmed*), so a collected transaction is
//! never decided afresh.
//!
//! One collection looks at one page of the group's decision rows (in key order, from
//! a cursor the caller keeps), so its work is bounded however many rows there are.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use megastore_types::{EgId, Position, ReplicaId, Time};

use super::decide::TwoPhaseClock;
use super::{
    decision_delete, decisions_range, facts_of, record_row, txn_of_decision_row, watermark_of,
    watermark_row, watermark_write,
};
use crate::messages::DataQuery;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::proposer::read::ReadError;
use crate::steps::{Ended, Step, Tagged};
use megastore_rowstore::KeyRange;

/// Decision rows one collection looks at.
pub const COLLECT_PAGE: usize = 128;

/// Record reads one collection has out at once: a page can ask for hundreds (every
/// participant of every old row), which would arrive at the replicas together.
const RECORD_READS_IN_FLIGHT: usize = 16;

/// The tag of the page's scan.
const SCAN: u32 = 0;
/// The tag of the watermark's read, before the page's.
const WATERMARK: u32 = u32::MAX - 1;
/// The tag of the deleting commit; a record read is tagged with its index plus one.
const DELETE: u32 = u32::MAX;

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectedDecisions {
    /// Decision rows deleted.
    pub collected: u64,
    /// Decision rows left: younger than the retention, with a record still pending
    /// somewhere (or a participant that could not be read), or lost to a racing
    /// collector.
    pub kept: u64,
    /// Where the next page starts (the rows after this key), when this page was full;
    /// none: the scan reached the end of the group's decisions.
    pub next: Option<Vec<u8>>,
}

/// What a collection pass does after one of its pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterPage {
    /// Collect the next page, the rows after this key.
    Next(Vec<u8>),
    /// The pass is over and some page kept rows (too young, a record still pending, a
    /// participant unread, a racing collector): look again one retention later.
    LookAgain,
    /// The pass is over and no page kept a row: nothing to look at until the group
    /// records another decision.
    Done,
}

/// One pass over a coordinator group's decision rows, page by page from the first:
/// the rule, shared by the replica server's group work and the simulator, for when a
/// group's decisions are looked at again. A row kept on any page of the pass — not
/// only the last — brings the group back.
#[derive(Debug, Clone, Default)]
pub struct CollectionPass {
    kept: bool,
    bugs: crate::ProtocolBugs,
}

impl CollectionPass {
    /// A pass (with `bugs`, for the simulator; [`CollectionPass::default`] has none).
    pub fn new(bugs: crate::ProtocolBugs) -> Self {
        Self { kept: false, bugs }
    }

    /// What to do after `page`, the pass's latest page.
    pub fn after_page(&mut self, page: &CollectedDecisions) -> AfterPage {
        self.kept |= page.kept > 0;
        if self.bugs.forget_kept_decisions() {
            // The mistake: kept rows are left until the group decides again.
            self.kept = false;
        }
        match &page.next {
            Some(next) => AfterPage::Next(next.clone()),
            None if self.kept => AfterPage::LookAgain,
            None => AfterPage::Done,
        }
    }
}

/// One decision row old enough to collect, while its participants are read.
#[derive(Debug)]
struct Candidate {
    row: Vec<u8>,
    /// When its transaction began preparing.
    prepared_ms: u64,
    /// Reads of its records not answered yet.
    waiting: usize,
    /// A record read present, or a read that failed: kept.
    keep: bool,
}

/// One collection of a page of `eg`'s decision rows.
#[derive(Debug)]
pub(crate) struct CollectDecisions {
    eg: EgId,
    retention: Duration,
    clock: TwoPhaseClock,
    /// The position the watermark was read at (before the page), and the next
    /// position's leader it named: the deleting commit's read position.
    read_at: Option<(Position, Option<ReplicaId>)>,
    /// The watermark read there.
    watermark: u64,
    /// The page's read, sent once the watermark is read.
    page: Option<Step>,
    candidates: Vec<Candidate>,
    /// Record read `tag - 1` is for candidate `reads[tag - 1]`.
    reads: Vec<usize>,
    /// Record reads not sent yet (at most [`RECORD_READS_IN_FLIGHT`] are out).
    unsent: VecDeque<Tagged>,
    deleting: Vec<usize>,
    done: CollectedDecisions,
    result: Option<Result<CollectedDecisions, ReadError>>,
}

impl CollectDecisions {
    /// A collection of the page of `eg`'s decision rows after `after` (from the first
    /// when none), and its first step.
    pub(crate) fn start(
        eg: EgId,
        after: Option<Vec<u8>>,
        retention: Duration,
        clock: TwoPhaseClock,
    ) -> (Self, Tagged) {
        let all = decisions_range(&eg);
        let range = match after {
            Some(mut key) => {
                // The first key after `key`.
                key.push(0);
                KeyRange {
                    start: key.max(all.start),
                    end: all.end,
                }
            }
            None => all,
        };
        let page = Step::Read {
            eg: eg.clone(),
            query: DataQuery::Scan {
                range,
                limit: Some(COLLECT_PAGE),
                reverse: false,
            },
            settle: false,
        };
        let step = Step::Read {
            eg: eg.clone(),
            query: DataQuery::Rows(vec![watermark_row(&eg)]),
            settle: false,
        };
        let collect = Self {
            eg,
            retention,
            clock,
            read_at: None,
            watermark: 0,
            page: Some(page),
            candidates: Vec::new(),
            reads: Vec::new(),
            unsent: VecDeque::new(),
            deleting: Vec::new(),
            done: CollectedDecisions::default(),
            result: None,
        };
        (collect, (WATERMARK, step))
    }

    /// A step it asked for ended: its next steps.
    pub(crate) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        match (tag, ended) {
            (SCAN | WATERMARK, Ended::Read(Err(e))) => {
                self.result = Some(Err(e));
                Vec::new()
            }
            (WATERMARK, Ended::Read(Ok(read))) => {
                // The page is read after: a commit validated from this earlier position
                // covers the page's rows too (it conflicts more, never less).
                self.read_at = Some((read.position.unwrap_or_default(), read.next_leader));
                self.watermark = watermark_of(read.rows.first());
                self.page
                    .take()
                    .map(|page| (SCAN, page))
                    .into_iter()
                    .collect()
            }
            (SCAN, Ended::Read(Ok(read))) => {
                if read.rows.len() >= COLLECT_PAGE {
                    self.done.next = read.rows.last().map(|r| r.key.clone());
                }
                self.on_page(now, &read.rows)
            }
            (DELETE, Ended::Commit(result)) => {
                let n = self.deleting.len() as u64;
                match result {
                    CommitResult::Committed { .. } => self.done.collected += n,
                    // A racing collector (the only other writer of old decision rows)
                    // or an unknown outcome: the next collection looks again.
                    _ => self.done.kept += n,
                }
                self.finish()
            }
            (tag, Ended::Read(read)) => {
                let Some(&i) = self.reads.get(tag as usize - 1) else {
                    return Vec::new();
                };
                let candidate = &mut self.candidates[i];
                candidate.waiting -= 1;
                match read {
                    Ok(read) if read.rows.is_empty() => {}
                    // Pending there still, or not known to be gone.
                    _ => candidate.keep = true,
                }
                let mut steps: Vec<Tagged> = self.unsent.pop_front().into_iter().collect();
                steps.extend(self.maybe_delete());
                steps
            }
            _ => Vec::new(),
        }
    }

    /// The page was read: reads of the records of every transaction old enough.
    fn on_page(&mut self, now: Time, rows: &[megastore_rowstore::Row]) -> Vec<Tagged> {
        let range = decisions_range(&self.eg);
        let wall = self.clock.wall_ms(now);
        let retention_ms = if self.clock.bugs.retention_unit_slip() {
            // The mistake: microseconds read as milliseconds.
            u64::try_from(self.retention.as_micros()).unwrap_or(u64::MAX)
        } else {
            u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX)
        };
        let mut steps = Vec::new();
        for row in rows.iter().filter(|r| range.contains(&r.key)) {
            // A row from before decisions recorded their facts is kept for ever.
            let Some(facts) = facts_of(row) else {
                self.done.kept += 1;
                continue;
            };
            if facts.prepared_ms.saturating_add(retention_ms) > wall {
                self.done.kept += 1;
                continue;
            }
            let Some(txn) = txn_of_decision_row(&self.eg, &row.key) else {
                self.done.kept += 1;
                continue;
            };
            let i = self.candidates.len();
            let recorded_in: &[EgId] = if self.clock.bugs.collect_unfinished() {
                // The mistake: nobody looks for the records.
                &[]
            } else {
                facts.recorded_in()
            };
            for eg in recorded_in {
                self.reads.push(i);
                let tag = u32::try_from(self.reads.len()).expect("fewer reads than u32::MAX");
                steps.push((
                    tag,
                    Step::Read {
                        eg: eg.clone(),
                        query: DataQuery::Rows(vec![record_row(eg, txn)]),
                        settle: false,
                    },
                ));
            }
            self.candidates.push(Candidate {
                row: row.key.clone(),
                prepared_ms: facts.prepared_ms,
                waiting: recorded_in.len(),
                keep: false,
            });
        }
        if steps.is_empty() {
            return self.maybe_delete();
        }
        self.unsent = steps.into();
        let first = self.unsent.len().min(RECORD_READS_IN_FLIGHT);
        self.unsent.drain(..first).collect()
    }

    /// Once every record read answered: the commit deleting the rows whose records are
    /// all gone.
    fn maybe_delete(&mut self) -> Vec<Tagged> {
        if self.candidates.iter().any(|c| c.waiting > 0) {
            return Vec::new();
        }
        self.deleting = (0..self.candidates.len())
            .filter(|&i| !self.candidates[i].keep)
            .collect();
        self.done.kept += (self.candidates.len() - self.deleting.len()) as u64;
        let Some((position, leader)) = self.read_at else {
            // Unreachable: candidates come from the page's read.
            return self.finish();
        };
        if self.deleting.is_empty() {
            return self.finish();
        }
        let rows: BTreeSet<Vec<u8>> = self
            .deleting
            .iter()
            .map(|&i| self.candidates[i].row.clone())
            .collect();
        let through = self
            .deleting
            .iter()
            .map(|&i| self.candidates[i].prepared_ms)
            .fold(self.watermark, u64::max);
        let mut writes: Vec<_> = rows.iter().map(|row| decision_delete(row)).collect();
        writes.push(watermark_write(&self.eg, through));
        let mut reads = rows;
        // Only collectors write a decision row this old, or the watermark: two racing
        // conflict, and the watermark never goes down.
        reads.insert(watermark_row(&self.eg));
        let step = Step::Commit {
            eg: self.eg.clone(),
            read_position: position,
            leader,
            writes,
            reads: ReadSet::from(reads),
            txn: None,
        };
        vec![(DELETE, step)]
    }

    fn finish(&mut self) -> Vec<Tagged> {
        self.result = Some(Ok(self.done.clone()));
        Vec::new()
    }

    /// Its result, once over.
    pub(crate) fn result(&self) -> Option<&Result<CollectedDecisions, ReadError>> {
        self.result.as_ref()
    }
}
