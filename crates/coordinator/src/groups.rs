//! The groups a coordinator remembers in its epoch, in as little memory as they fit:
//! each is its key (boxed: 16 bytes and the key's own) and 8 bytes of state — the
//! position, with the top bit telling invalid from valid — in an ordered map, so that
//! forgetting valid groups goes round them in turn. Measured by
//! `tests/memory.rs`.

use std::collections::BTreeMap;

use megastore_types::{EgId, Position};

use crate::coordinator::GroupState;

/// The top bit of a packed state: invalid.
const INVALID_BIT: u64 = 1 << 63;

/// A [`GroupState`] in 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packed(u64);

impl Packed {
    fn new(state: GroupState) -> Self {
        let (position, bit) = match state {
            GroupState::Valid { through } => (through, 0),
            GroupState::Invalid { at } => (at, INVALID_BIT),
        };
        assert!(
            position.0 < INVALID_BIT,
            "position {position:?} is past what a coordinator records"
        );
        Packed(position.0 | bit)
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

/// The remembered groups, and how many of them are invalid.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    map: BTreeMap<Box<[u8]>, Packed>,
    invalid: usize,
    /// Where the search for a valid group to forget goes on from.
    forget_from: Option<Box<[u8]>>,
}

impl Groups {
    /// What it remembers of `eg`.
    pub(crate) fn get(&self, eg: &EgId) -> Option<GroupState> {
        self.map.get(eg.0.as_slice()).map(|p| p.state())
    }

    /// Remembers `state` for `eg`.
    pub(crate) fn set(&mut self, eg: &EgId, state: GroupState) {
        let packed = Packed::new(state);
        let before = match self.map.get_mut(eg.0.as_slice()) {
            Some(slot) => Some(std::mem::replace(slot, packed)),
            None => {
                self.map.insert(eg.0.clone().into_boxed_slice(), packed);
                None
            }
        };
        if before.is_some_and(Packed::is_invalid) {
            self.invalid -= 1;
        }
        if packed.is_invalid() {
            self.invalid += 1;
        }
    }

    /// Forgets every group.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.invalid = 0;
        self.forget_from = None;
    }

    /// How many are valid.
    pub(crate) fn valid(&self) -> usize {
        self.map.len() - self.invalid
    }

    /// How many are invalid.
    pub(crate) fn invalid(&self) -> usize {
        self.invalid
    }

    /// Forgets one valid group, going on from where the last one was found, so each
    /// is forgotten in turn.
    pub(crate) fn forget_valid(&mut self) {
        let start = self.forget_from.take();
        let first_valid = |from: Option<&[u8]>| -> Option<Box<[u8]>> {
            let mut range = match from {
                Some(key) => self
                    .map
                    .range::<[u8], _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded)),
                None => self.map.range::<[u8], _>(..),
            };
            range.find(|(_, p)| !p.is_invalid()).map(|(k, _)| k.clone())
        };
        let found = first_valid(start.as_deref())
            .or_else(|| start.as_ref().and_then(|_| first_valid(None)));
        if let Some(key) = found {
            self.map.remove(&key);
            self.forget_from = Some(key);
        }
    }

    /// Counts the invalid groups one by one (for the coordinator's invariant check).
    pub(crate) fn count_invalid(&self) -> usize {
        self.map.values().filter(|p| p.is_invalid()).count()
    }

    /// How many it remembers.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
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
