//! Verifying global index hits: each hit a scan found at some replica is checked
//! against its group's mirror (the authoritative copy, docs/protocol.md "Global
//! indexes"), read now by a current read of that group. A hit is kept only if the
//! mirror still holds the same row with the same cells: a verified scan never returns
//! a stale entry, at one current read per group of hits.
//!
//! This module keeps the bookkeeping (which groups to read, what each answer means);
//! [`crate::ClientCore`] runs the current reads, a bounded number at once.

use std::collections::{BTreeMap, VecDeque};

use megastore_rowstore::Row;
use megastore_types::{EgId, Position};

use crate::bugs::ProtocolBugs;
use crate::entry::mirror_row_of;
use crate::messages::DataQuery;
use crate::proposer::read::{ReadError, ReadResult};

/// A global index row a scan found, and the group whose mirror holds it (the caller
/// knows it from the entry: the group of the entity the entry names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalHit {
    /// The group.
    pub eg: EgId,
    /// The global index row, as the scan returned it.
    pub row: Row,
}

/// What the check of one hit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedHit {
    /// The hit.
    pub hit: GlobalHit,
    /// The position of its group whose mirror it was checked against.
    pub position: Option<Position>,
    /// Whether the mirror there holds the row with the same cells (`false`: the entry
    /// is stale, and a verified scan drops it).
    pub current: bool,
}

/// The state of one verification: the groups still to read, and each hit's verdict.
#[derive(Debug)]
pub(crate) struct Verify {
    hits: Vec<GlobalHit>,
    /// Per hit, what its group's read found (`None`: not read yet).
    verdicts: Vec<Option<(Option<Position>, bool)>>,
    /// Groups not read yet, each with its hits' indexes.
    waiting: VecDeque<(EgId, Vec<usize>)>,
    /// How many group reads may run at once.
    in_flight_max: usize,
    /// How many run now.
    in_flight: usize,
    failed: Option<ReadError>,
    /// The knobs (empty in production builds).
    bugs: ProtocolBugs,
}

impl Verify {
    /// A verification of `hits`, reading at most `in_flight_max` groups at once.
    pub(crate) fn new(hits: Vec<GlobalHit>, in_flight_max: usize, bugs: ProtocolBugs) -> Self {
        let mut by_group: BTreeMap<&EgId, Vec<usize>> = BTreeMap::new();
        for (i, hit) in hits.iter().enumerate() {
            by_group.entry(&hit.eg).or_default().push(i);
        }
        let waiting = by_group
            .into_iter()
            .map(|(eg, indexes)| (eg.clone(), indexes))
            .collect();
        Self {
            verdicts: vec![None; hits.len()],
            hits,
            waiting,
            in_flight_max: in_flight_max.max(1),
            in_flight: 0,
            failed: None,
            bugs,
        }
    }

    /// The next group to read and the query of its mirror rows, while fewer than the
    /// bound run and nothing failed.
    pub(crate) fn next_read(&mut self) -> Option<(EgId, Vec<usize>, DataQuery)> {
        if self.failed.is_some() || self.in_flight >= self.in_flight_max {
            return None;
        }
        let (eg, indexes) = self.waiting.pop_front()?;
        let rows = indexes
            .iter()
            .map(|&i| mirror_row_of(&eg, &self.hits[i].row.key))
            .collect();
        self.in_flight += 1;
        Some((eg, indexes, DataQuery::Rows(rows)))
    }

    /// The read of the group holding hits `indexes` finished.
    pub(crate) fn on_read(&mut self, indexes: &[usize], result: Result<ReadResult, ReadError>) {
        self.in_flight -= 1;
        let read = match result {
            Ok(read) => read,
            Err(e) => {
                self.failed.get_or_insert(e);
                return;
            }
        };
        for &i in indexes {
            let hit = &self.hits[i];
            let mirror = mirror_row_of(&hit.eg, &hit.row.key);
            let now = read.rows.iter().find(|r| r.key == mirror);
            let current = self.bugs.verify_trusts_the_scan() || same_cells(&hit.row, now);
            self.verdicts[i] = Some((read.position, current));
        }
    }

    /// Every hit with its verdict, in the order given, once every group was read; the
    /// first failed read's error if one failed (once no read runs).
    pub(crate) fn result(&self) -> Option<Result<Vec<CheckedHit>, ReadError>> {
        if self.in_flight > 0 {
            return None;
        }
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        if !self.waiting.is_empty() {
            return None;
        }
        let checked = self
            .hits
            .iter()
            .zip(&self.verdicts)
            .map(|(hit, verdict)| {
                let (position, current) = verdict.expect("every group was read");
                CheckedHit {
                    hit: hit.clone(),
                    position,
                    current,
                }
            })
            .collect();
        Some(Ok(checked))
    }
}

/// Whether the mirror row read now (`None`: absent) has exactly the cells (column and
/// value; timestamps aside, as a rewrite of the same entry leaves it current) of the
/// global row a scan found.
fn same_cells(scanned: &Row, now: Option<&Row>) -> bool {
    let Some(now) = now else {
        return false;
    };
    !scanned.cells.is_empty()
        && scanned.cells.len() == now.cells.len()
        && scanned
            .cells
            .iter()
            .all(|(column, cell)| now.value(column) == Some(cell.value.as_slice()))
}

#[cfg(test)]
mod tests {
    use megastore_rowstore::Cell;
    use megastore_types::ReplicaId;

    use super::*;
    use crate::proposer::read::ReadPath;

    fn row(key: &[u8], cells: &[(&str, &str, u64)]) -> Row {
        Row {
            key: key.to_vec(),
            cells: cells
                .iter()
                .map(|(c, v, ts)| {
                    let cell = Cell {
                        timestamp: *ts,
                        value: v.as_bytes().to_vec(),
                    };
                    (c.as_bytes().to_vec(), cell)
                })
                .collect(),
        }
    }

    fn read(position: u64, rows: Vec<Row>) -> ReadResult {
        ReadResult {
            position: Some(Position(position)),
            rows,
            replica: ReplicaId(1),
            next_leader: None,
            path: ReadPath::Majority,
            prepared: Vec::new(),
        }
    }

    #[test]
    fn a_hit_is_current_only_while_the_mirror_has_the_same_cells() {
        let scanned = row(b"\xFDk", &[("v", "a", 3), ("s", "x", 3)]);
        let mirror = |cells: &[(&str, &str, u64)]| row(b"m", cells);
        assert!(same_cells(
            &scanned,
            Some(&mirror(&[("v", "a", 9), ("s", "x", 9)]))
        ));
        assert!(!same_cells(&scanned, None), "deleted");
        assert!(!same_cells(
            &scanned,
            Some(&mirror(&[("v", "b", 9), ("s", "x", 9)]))
        ));
        assert!(
            !same_cells(&scanned, Some(&mirror(&[("v", "a", 9)]))),
            "a cell gone"
        );
        assert!(!same_cells(
            &scanned,
            Some(&mirror(&[("v", "a", 9), ("s", "x", 9), ("t", "y", 9)]))
        ));
    }

    /// Groups are read a bounded number at once, each once for all its hits, and the
    /// verdicts come back in the hits' order.
    #[test]
    fn groups_are_read_once_each_within_the_bound() {
        let g = |n: &str| EgId(n.as_bytes().to_vec());
        let hit = |eg: &str, key: &[u8], v: &str| GlobalHit {
            eg: g(eg),
            row: row(key, &[("v", v, 1)]),
        };
        let hits = vec![
            hit("b", b"\xFD1", "x"),
            hit("a", b"\xFD2", "y"),
            hit("b", b"\xFD3", "z"),
        ];
        let mut verify = Verify::new(hits, 1, ProtocolBugs::default());
        let (first, indexes, query) = verify.next_read().expect("a group to read");
        assert_eq!((first.clone(), indexes.clone()), (g("a"), vec![1]));
        assert_eq!(
            query,
            DataQuery::Rows(vec![mirror_row_of(&g("a"), b"\xFD2")])
        );
        assert!(verify.next_read().is_none(), "one read at once");
        let mirror =
            |eg: &str, key: &[u8], v: &str| row(&mirror_row_of(&g(eg), key), &[("v", v, 4)]);
        verify.on_read(&indexes, Ok(read(4, vec![mirror("a", b"\xFD2", "y")])));
        assert!(verify.result().is_none(), "b is not read yet");
        let (second, indexes, _) = verify.next_read().expect("b");
        assert_eq!((second, indexes.clone()), (g("b"), vec![0, 2]));
        verify.on_read(
            &indexes,
            Ok(read(
                7,
                vec![mirror("b", b"\xFD1", "changed"), mirror("b", b"\xFD3", "z")],
            )),
        );
        let verdicts: Vec<_> = verify
            .result()
            .expect("done")
            .expect("no read failed")
            .into_iter()
            .map(|c| (c.position.map(|p| p.0), c.current))
            .collect();
        assert_eq!(
            verdicts,
            [(Some(7), false), (Some(4), true), (Some(7), true)]
        );
    }

    #[test]
    fn a_failed_group_read_fails_the_verification_once_no_read_runs() {
        let hits = (0..3u8)
            .map(|i| GlobalHit {
                eg: EgId(vec![b'a' + i]),
                row: row(&[0xFD, i], &[("v", "x", 1)]),
            })
            .collect();
        let mut verify = Verify::new(hits, 2, ProtocolBugs::default());
        let (_, first, _) = verify.next_read().unwrap();
        let (_, second, _) = verify.next_read().unwrap();
        verify.on_read(&first, Err(ReadError::Unavailable("down".into())));
        assert!(
            verify.next_read().is_none(),
            "nothing more starts after a failure"
        );
        assert!(verify.result().is_none(), "the other read still runs");
        verify.on_read(&second, Ok(read(1, Vec::new())));
        assert_eq!(
            verify.result(),
            Some(Err(ReadError::Unavailable("down".into())))
        );
    }
}
