//! The groups a coordinator remembers in its epoch, in as little memory as they fit:
//! each is one allocation — 8 bytes of state (the position, with the top bit telling
//! invalid from valid) followed by the group's key — held by a 16-byte box in an
//! ordered set, ordered by the key, so that forgetting valid groups goes round them in
//! turn. Measured by `tests/memory.rs`.

use std::borrow::Borrow;
use std::collections::BTreeSet;

use megastore_types::{EgId, Position};

use crate::coordinator::GroupState;

/// The top bit of a packed state: invalid.
const INVALID_BIT: u64 = 1 << 63;

/// A [`GroupState`] in 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packed(u64);

impl Packed {
    /// `state`, with a position from 2^63 up (which no log reaches: one commit a
    /// nanosecond takes 292 years to get there, but a request may name one) recorded
    /// as 2^63 − 1 rather than taken for the other kind of state.
    fn new(state: GroupState) -> Self {
        let (position, bit) = match state {
            GroupState::Valid { through } => (through, 0),
            GroupState::Invalid { at } => (at, INVALID_BIT),
        };
        Packed(position.0.min(INVALID_BIT - 1) | bit)
    }

    fn state(self) -> GroupState {
        let position = Position(self.0 & !INVALID_BIT);
        if self.is_invalid() {
            GroupState::Invalid { at: position }
        } else {
            GroupState::Valid { through: position }
        }
    }

    fn is_invalid(self) -> bool {
        self.0 & INVALID_BIT != 0
    }
}

/// One remembered group: its packed state, then its key, in one allocation.
#[derive(Debug, Clone)]
struct Entry(Box<[u8]>);

impl Entry {
    fn new(key: &[u8], state: Packed) -> Self {
        let mut bytes = Vec::with_capacity(8 + key.len());
        bytes.extend_from_slice(&state.0.to_le_bytes());
        bytes.extend_from_slice(key);
        Entry(bytes.into_boxed_slice())
    }

    fn key(&self) -> &[u8] {
        &self.0[8..]
    }

    fn packed(&self) -> Packed {
        let mut state = [0; 8];
        state.copy_from_slice(&self.0[..8]);
        Packed(u64::from_le_bytes(state))
    }
}

// Entries are the same, and ordered, by their keys alone: a set of them is a map from
// key to state, looked up by `&[u8]`.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

impl Borrow<[u8]> for Entry {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

/// The remembered groups, and how many of them are invalid.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    set: BTreeSet<Entry>,
    invalid: usize,
    /// Where the search for a valid group to forget goes on from.
    forget_from: Option<Box<[u8]>>,
}

impl Groups {
    /// What it remembers of `eg`.
    pub(crate) fn get(&self, eg: &EgId) -> Option<GroupState> {
        self.set.get(eg.0.as_slice()).map(|e| e.packed().state())
    }

    /// Remembers `state` for `eg`.
    pub(crate) fn set(&mut self, eg: &EgId, state: GroupState) {
        let packed = Packed::new(state);
        let before = self.set.replace(Entry::new(&eg.0, packed));
        if before.is_some_and(|e| e.packed().is_invalid()) {
            self.invalid -= 1;
        }
        if packed.is_invalid() {
            self.invalid += 1;
        }
    }

    /// Forgets every group.
    pub(crate) fn clear(&mut self) {
        self.set.clear();
        self.invalid = 0;
        self.forget_from = None;
    }

    /// How many are valid.
    pub(crate) fn valid(&self) -> usize {
        self.set.len() - self.invalid
    }

    /// How many are invalid.
    pub(crate) fn invalid(&self) -> usize {
        self.invalid
    }

    /// Forgets one valid group, going on from where the last one was found, so each
    /// is forgotten in turn.
    pub(crate) fn forget_valid(&mut self) {
        use std::ops::Bound;
        let start = self.forget_from.take();
        let first_valid = |from: Option<&[u8]>| -> Option<Box<[u8]>> {
            let mut range = match from {
                Some(key) => self
                    .set
                    .range::<[u8], _>((Bound::Included(key), Bound::Unbounded)),
                None => self.set.range::<[u8], _>(..),
            };
            range
                .find(|e| !e.packed().is_invalid())
                .map(|e| Box::from(e.key()))
        };
        let found = first_valid(start.as_deref())
            .or_else(|| start.as_ref().and_then(|_| first_valid(None)));
        if let Some(key) = found {
            self.set.remove(&*key);
            self.forget_from = Some(key);
        }
    }

    /// Counts the invalid groups one by one (for the coordinator's invariant check).
    pub(crate) fn count_invalid(&self) -> usize {
        self.set.iter().filter(|e| e.packed().is_invalid()).count()
    }

    /// How many it remembers.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_pack_into_eight_bytes_and_back() {
        assert_eq!(std::mem::size_of::<Packed>(), 8);
        for state in [
            GroupState::Valid {
                through: Position(0),
            },
            GroupState::Invalid { at: Position(7) },
            GroupState::Valid {
                through: Position(INVALID_BIT - 1),
            },
        ] {
            assert_eq!(Packed::new(state).state(), state);
        }
        // A position no log reaches, from a request, neither panics nor flips the kind.
        assert_eq!(
            Packed::new(GroupState::Valid {
                through: Position(u64::MAX)
            })
            .state(),
            GroupState::Valid {
                through: Position(INVALID_BIT - 1)
            }
        );
        let mut groups = Groups::default();
        let eg = EgId(b"g".to_vec());
        groups.set(&eg, GroupState::Invalid { at: Position(3) });
        groups.set(
            &eg,
            GroupState::Valid {
                through: Position(4),
            },
        );
        assert_eq!((groups.valid(), groups.invalid()), (1, 0));
        groups.forget_valid();
        assert_eq!(groups.len(), 0);
    }
}
