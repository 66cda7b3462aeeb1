//! The hottest entity groups by commits and by conflicts, in bounded memory: the
//! paper's "find the hot entity group" troubleshooting (`megastore top`). A filtered
//! space-saving top-k (the `topk` crate) per kind, owned by the client's driver task,
//! so recording is a plain method call on the task that sees every outcome.

use megastore_types::EgId;
use topk::FilteredSpaceSaving;

/// How many groups each kind tracks: counts of the top few are then close to exact
/// (space-saving's error shrinks as tracked slots outnumber the heavy hitters).
pub const HOT_GROUPS_TRACKED: usize = 64;

/// One group's estimated count since the client started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCount {
    /// The group.
    pub group: EgId,
    /// At least its true count.
    pub count: u64,
    /// How far above its true count `count` may be.
    pub error: u64,
}

/// The hottest groups now, most first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotGroupsNow {
    /// By commits.
    pub commits: Vec<GroupCount>,
    /// By conflicts (commits that lost their position).
    pub conflicts: Vec<GroupCount>,
}

/// The top-k counters.
pub(crate) struct HotGroups {
    commits: FilteredSpaceSaving<Vec<u8>>,
    conflicts: FilteredSpaceSaving<Vec<u8>>,
}

impl HotGroups {
    pub(crate) fn new() -> Self {
        Self {
            commits: FilteredSpaceSaving::new(HOT_GROUPS_TRACKED),
            conflicts: FilteredSpaceSaving::new(HOT_GROUPS_TRACKED),
        }
    }

    pub(crate) fn committed(&mut self, eg: &EgId) {
        self.commits.insert(eg.0.clone(), 1);
    }

    pub(crate) fn conflicted(&mut self, eg: &EgId) {
        self.conflicts.insert(eg.0.clone(), 1);
    }

    /// The `n` hottest of each kind.
    pub(crate) fn top(&self, n: usize) -> HotGroupsNow {
        HotGroupsNow {
            commits: top_of(&self.commits, n),
            conflicts: top_of(&self.conflicts, n),
        }
    }
}

fn top_of(counts: &FilteredSpaceSaving<Vec<u8>>, n: usize) -> Vec<GroupCount> {
    let mut all: Vec<GroupCount> = counts
        .iter()
        .map(|(group, counter)| GroupCount {
            group: EgId(group.clone()),
            count: counter.estimated_count(),
            error: counter.associated_error(),
        })
        .collect();
    // Most first; ties by key, so a view does not flicker between equals.
    all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.group.cmp(&b.group)));
    all.truncate(n);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handful of hot groups among many cold ones are found, in order, with exact
    /// counts, while memory stays at the tracked bound.
    #[test]
    fn the_hot_groups_stand_out_among_many_cold_ones() {
        let mut hot = HotGroups::new();
        let g = |n: u32| EgId(format!("g{n}").into_bytes());
        for round in 0..200u32 {
            for (n, every) in [(1, 1), (2, 2), (3, 4)] {
                if round % every == 0 {
                    hot.committed(&g(n));
                }
            }
            // Cold groups, each seen once.
            for cold in 0..20 {
                hot.committed(&g(1_000 + round * 20 + cold));
            }
        }
        hot.conflicted(&g(2));
        let now = hot.top(3);
        let found: Vec<_> = now.commits.iter().map(|c| c.group.clone()).collect();
        assert_eq!(found, [g(1), g(2), g(3)]);
        let lower_bounds: Vec<_> = now.commits.iter().map(|c| c.count - c.error).collect();
        assert!(lower_bounds[0] <= 200 && now.commits[0].count >= 200);
        assert_eq!(now.conflicts.len(), 1);
        assert!(hot.commits.iter().count() <= HOT_GROUPS_TRACKED);
    }
}
