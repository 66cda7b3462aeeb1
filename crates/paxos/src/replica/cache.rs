//! Which loaded groups were used least recently: the order in which a replica with a
//! bounded group cache ([`super::ReplicaConfig::cache_groups`]) evicts them.
//!
//! A use is a request naming the group (and its load); the sweep's own look at every
//! loaded group is not, or sweeping would keep every group warm.

use std::collections::BTreeMap;

use megastore_types::EgId;

/// Loaded groups by last use. Invariant (*one-stamp-per-group*): `order` and `stamps`
/// hold the same groups, each once, under the same stamp.
///
/// `order` is keyed by stamp alone (stamps are unique), so a touch moves the group's
/// name from its old stamp to its new one instead of cloning and comparing names:
/// every request touches its group, and the clones were a visible share of a
/// replica's step in profiles (docs/performance.md).
#[derive(Debug, Default)]
pub(crate) struct Recency {
    stamps: BTreeMap<EgId, u64>,
    order: BTreeMap<u64, EgId>,
    next: u64,
}

impl Recency {
    /// How many groups it orders.
    pub(crate) fn len(&self) -> usize {
        self.stamps.len()
    }

    /// `eg` was used now.
    pub(crate) fn touch(&mut self, eg: &EgId) {
        let stamp = self.next;
        self.next += 1;
        match self.stamps.get_mut(eg) {
            Some(old) => {
                let name = self
                    .order
                    .remove(old)
                    .expect("one-stamp-per-group: a stamped group is in the order");
                *old = stamp;
                self.order.insert(stamp, name);
            }
            None => {
                self.stamps.insert(eg.clone(), stamp);
                self.order.insert(stamp, eg.clone());
            }
        }
    }

    /// `eg` is no longer loaded.
    pub(crate) fn remove(&mut self, eg: &EgId) {
        if let Some(old) = self.stamps.remove(eg) {
            self.order.remove(&old);
        }
    }

    /// Whether it orders `eg`.
    pub(crate) fn orders(&self, eg: &EgId) -> bool {
        self.stamps.contains_key(eg)
    }

    /// The least recently used group.
    pub(crate) fn oldest(&self) -> Option<&EgId> {
        self.order.first_key_value().map(|(_, eg)| eg)
    }

    /// Panics unless *one-stamp-per-group* holds.
    pub(crate) fn check(&self) {
        assert_eq!(self.stamps.len(), self.order.len(), "one-stamp-per-group");
        for (stamp, eg) in &self.order {
            assert_eq!(self.stamps.get(eg), Some(stamp), "one-stamp-per-group");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eg(name: &str) -> EgId {
        EgId(name.as_bytes().to_vec())
    }

    #[test]
    fn the_oldest_is_the_least_recently_touched() {
        let mut recency = Recency::default();
        for name in ["a", "b", "c"] {
            recency.touch(&eg(name));
        }
        recency.touch(&eg("a"));
        assert_eq!(recency.oldest(), Some(&eg("b")));
        recency.remove(&eg("b"));
        assert_eq!(recency.oldest(), Some(&eg("c")));
        assert_eq!(recency.len(), 2);
        recency.check();
    }
}
