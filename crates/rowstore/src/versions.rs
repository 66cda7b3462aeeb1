//! Version-selection rules shared by every store, so they agree on what a read sees
//! and on what garbage collection may remove.

use crate::types::{Cell, Timestamp};

/// The cell a read at `at` sees, given one column's versions **newest first**
/// (`None` value = deletion tombstone).
pub fn visible_version<'a>(
    versions_newest_first: impl IntoIterator<Item = (Timestamp, Option<&'a [u8]>)>,
    at: Timestamp,
) -> Option<Cell> {
    let (timestamp, value) = versions_newest_first
        .into_iter()
        .find(|(ts, _)| *ts <= at)?;
    value.map(|v| Cell {
        timestamp,
        value: v.to_vec(),
    })
}

/// The timestamps garbage collection removes from one column, given its versions
/// **newest first**: everything below the newest version at or below `watermark`,
/// plus that version itself when it is a tombstone.
pub fn garbage_versions(
    versions_newest_first: impl IntoIterator<Item = (Timestamp, bool)>,
    watermark: Timestamp,
) -> Vec<Timestamp> {
    let mut kept_anchor = false;
    let mut garbage = Vec::new();
    for (ts, is_tombstone) in versions_newest_first {
        if ts > watermark {
            continue;
        }
        if !kept_anchor {
            kept_anchor = true;
            if !is_tombstone {
                continue;
            }
        }
        garbage.push(ts);
    }
    garbage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sees_newest_version_at_or_below() {
        let v = [(9, Some(&b"c"[..])), (5, None), (2, Some(&b"a"[..]))];
        assert_eq!(visible_version(v, 10).unwrap().value, b"c");
        assert_eq!(visible_version(v, 6), None);
        assert_eq!(
            visible_version(v, 4).unwrap(),
            Cell {
                timestamp: 2,
                value: b"a".to_vec()
            }
        );
        assert_eq!(visible_version(v, 1), None);
    }

    #[test]
    fn gc_keeps_the_anchor_unless_it_is_a_tombstone() {
        assert_eq!(
            garbage_versions([(9, false), (5, false), (2, false)], 6),
            vec![2]
        );
        assert_eq!(
            garbage_versions([(9, false), (5, true), (2, false)], 6),
            vec![5, 2]
        );
        assert_eq!(garbage_versions([(9, false)], 6), Vec::<u64>::new());
    }
}
