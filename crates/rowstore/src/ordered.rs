//! Order-preserving, self-delimiting encoding of byte strings, and key-range helpers.
//!
//! `escape(a) < escape(b)` exactly when `a < b`, and no escaped string is a prefix of
//! another, so escaped strings can be concatenated into composite keys that still sort
//! component by component. The schema crate's key codec uses this for `string` and
//! `bytes` components; the RocksDB store uses it to lay out `row ‖ column ‖ timestamp`.
//!
//! Encoding: every `0x00` byte becomes `0x00 0xFF`; the string ends with `0x00 0x01`.

use std::cmp::Ordering;

/// Marks the end of an escaped string (after the `0x00` escape byte).
const TERMINATOR: u8 = 0x01;
/// Follows an escaped `0x00` data byte.
const ESCAPED_ZERO: u8 = 0xFF;

/// Appends the escaped form of `bytes` to `out`.
pub fn escape_into(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 2);
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(ESCAPED_ZERO);
        }
    }
    out.extend_from_slice(&[0, TERMINATOR]);
}

/// Returns the escaped form of `bytes`.
pub fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 2);
    escape_into(bytes, &mut out);
    out
}

/// Why an escaped string could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnescapeError {
    /// The input ended before the terminator.
    #[error("escaped string is not terminated")]
    Unterminated,
    /// A `0x00` byte was followed by something other than `0xFF` or `0x01`.
    #[error("invalid escape 0x00 0x{0:02x}")]
    InvalidEscape(u8),
}

/// Decodes one escaped string from the front of `input`, advancing it past the
/// terminator. `invert` undoes a byte-wise complement (descending key components).
pub fn unescape(input: &mut &[u8], invert: bool) -> Result<Vec<u8>, UnescapeError> {
    let mask = if invert { 0xFF } else { 0x00 };
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let b = input[i] ^ mask;
        if b != 0 {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&next) = input.get(i + 1) else {
            return Err(UnescapeError::Unterminated);
        };
        match next ^ mask {
            ESCAPED_ZERO => out.push(0),
            TERMINATOR => {
                *input = &input[i + 2..];
                return Ok(out);
            }
            other => return Err(UnescapeError::InvalidEscape(other)),
        }
        i += 2;
    }
    Err(UnescapeError::Unterminated)
}

/// The smallest byte string greater than every string that starts with `prefix`,
/// or `None` when no such string exists (`prefix` is empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut succ = prefix[..=last].to_vec();
    succ[last] += 1;
    Some(succ)
}

/// A half-open range of byte keys: `start` inclusive, `end` exclusive, `None` = unbounded.
///
/// Used for row ranges and for column ranges alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KeyRange {
    /// The smallest key in the range.
    pub start: Vec<u8>,
    /// The first key past the range; `None` means no upper bound.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self::default()
    }

    /// `[start, end)`.
    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self {
            start: start.into(),
            end: Some(end.into()),
        }
    }

    /// Exactly the keys that start with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let start = prefix.into();
        let end = prefix_successor(&start);
        Self { start, end }
    }

    /// Exactly one key.
    pub fn single(key: impl Into<Vec<u8>>) -> Self {
        let start = key.into();
        let mut end = start.clone();
        end.push(0);
        Self {
            start,
            end: Some(end),
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// Whether the range holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.end
            .as_deref()
            .is_some_and(|end| end <= self.start.as_slice())
    }

    /// The keys in both ranges, if any.
    pub fn intersection(&self, other: &KeyRange) -> Option<KeyRange> {
        let start = std::cmp::max(&self.start, &other.start).clone();
        let end = match (&self.end, &other.end) {
            (Some(a), Some(b)) => Some(std::cmp::min(a, b).clone()),
            (Some(end), None) | (None, Some(end)) => Some(end.clone()),
            (None, None) => None,
        };
        let both = KeyRange { start, end };
        (!both.is_empty()).then_some(both)
    }

    /// Where `key` lies relative to the range.
    pub fn position_of(&self, key: &[u8]) -> Ordering {
        if key < self.start.as_slice() {
            Ordering::Less
        } else if self.contains(key) {
            Ordering::Equal
        } else {
            Ordering::Greater
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn escape_preserves_order_and_round_trips(a in proptest::collection::vec(any::<u8>(), 0..12),
                                                   b in proptest::collection::vec(any::<u8>(), 0..12),
                                                   invert: bool) {
            let (mut ea, mut eb) = (escape(&a), escape(&b));
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            if invert {
                ea.iter_mut().for_each(|x| *x = !*x);
                eb.iter_mut().for_each(|x| *x = !*x);
                prop_assert_eq!(b.cmp(&a), ea.cmp(&eb));
            }
            let mut joined = ea.clone();
            joined.extend_from_slice(&eb);
            let mut rest = joined.as_slice();
            prop_assert_eq!(&unescape(&mut rest, invert).unwrap(), &a);
            prop_assert_eq!(&unescape(&mut rest, invert).unwrap(), &b);
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn prefix_range_holds_exactly_the_prefixed_keys(prefix in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..4),
                                                        key in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..6)) {
            let range = KeyRange::prefix(prefix.clone());
            prop_assert_eq!(range.contains(&key), key.starts_with(&prefix));
        }

        #[test]
        fn an_intersection_holds_exactly_the_keys_in_both(
            bounds in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..3), 4),
            open_ends in (any::<bool>(), any::<bool>()),
            key in proptest::collection::vec(0u8..4, 0..4),
        ) {
            let range = |start: &Vec<u8>, end: &Vec<u8>, open: bool| KeyRange {
                start: start.clone(),
                end: (!open).then(|| end.clone()),
            };
            let a = range(&bounds[0], &bounds[1], open_ends.0);
            let b = range(&bounds[2], &bounds[3], open_ends.1);
            let both = a.intersection(&b);
            prop_assert_eq!(
                both.as_ref().is_some_and(|r| r.contains(&key)),
                a.contains(&key) && b.contains(&key)
            );
            prop_assert!(both.is_none_or(|r| !r.is_empty()));
        }

        #[test]
        fn unescape_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16), invert: bool) {
            let mut input = bytes.as_slice();
            let _ = unescape(&mut input, invert);
        }
    }

    #[test]
    fn successor_of_all_ff_is_unbounded() {
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
    }

    #[test]
    fn single_range_holds_one_key() {
        let r = KeyRange::single(b"ab".to_vec());
        assert!(r.contains(b"ab"));
        assert!(!r.contains(b"ab\0"));
        assert!(!r.contains(b"a"));
    }

    #[test]
    fn truncated_escape_is_an_error() {
        let mut input: &[u8] = &[b'a', 0];
        assert_eq!(
            unescape(&mut input, false),
            Err(UnescapeError::Unterminated)
        );
        let mut input: &[u8] = &[0, 7];
        assert_eq!(
            unescape(&mut input, false),
            Err(UnescapeError::InvalidEscape(7))
        );
    }
}
