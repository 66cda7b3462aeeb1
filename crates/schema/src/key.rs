//! The key codec: an order-preserving ("memcomparable") encoding of typed tuples.
//!
//! Comparing two encodings byte by byte gives the same answer as comparing the tuples
//! component by component (each component in its own direction). Every component is
//! self-delimiting, so the encoding of a tuple's first `k` components is a byte prefix
//! of the whole tuple's encoding, and no two tuples of one shape prefix each other.
//!
//! | type | ascending encoding |
//! |---|---|
//! | `int32`, `int64`, `timestamp` | big-endian two's complement with the sign bit flipped (4 or 8 bytes) |
//! | `uint32`, `uint64` | big-endian (4 or 8 bytes) |
//! | `float`, `double` | IEEE bits, big-endian; positive: sign bit flipped, negative: all bits flipped; every NaN stored as the positive quiet NaN (after `+inf`) |
//! | `bool` | one byte, `0` or `1` |
//! | `string`, `bytes` | the bytes with `0x00` escaped as `0x00 0xFF`, ended by `0x00 0x01` |
//!
//! A descending component is the ascending encoding with every byte complemented.
//! Decoding needs the tuple's shape: the encoding carries no type tags.
//!
//! SCATTER: [`scatter_prefix`] is the first two bytes (big-endian) of the XXH3-64 hash
//! (seed 0) of the encoded root key.

use megastore_rowstore::ordered::{UnescapeError, escape_into, unescape};
use serde::{Deserialize, Serialize};

use crate::types::{Direction, ScalarType, Value, canonical_f32, canonical_f64};

/// The shape of one key component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyPart {
    /// The component's type.
    pub ty: ScalarType,
    /// Its order.
    pub direction: Direction,
}

impl KeyPart {
    /// An ascending component of type `ty`.
    pub fn asc(ty: ScalarType) -> Self {
        Self {
            ty,
            direction: Direction::Asc,
        }
    }
}

/// Why a key could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A value of the wrong type for its component.
    #[error("key component {position} must be {expected}, got {found}")]
    TypeMismatch {
        /// Zero-based component index.
        position: usize,
        /// The component's type.
        expected: ScalarType,
        /// The value's type.
        found: ScalarType,
    },
    /// Too many or too few values for the tuple.
    #[error("key has {expected} components, got {found} values")]
    Arity {
        /// Components in the shape.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// The bytes ended inside a component.
    #[error("key ends inside component {position} ({ty})")]
    Truncated {
        /// Zero-based component index.
        position: usize,
        /// The component's type.
        ty: ScalarType,
    },
    /// A string or bytes component is malformed.
    #[error("key component {position}: {source}")]
    Escape {
        /// Zero-based component index.
        position: usize,
        /// What is wrong with the escaping.
        source: UnescapeError,
    },
    /// A bool component holds something other than 0 or 1.
    #[error("key component {position}: bool byte {byte}")]
    InvalidBool {
        /// Zero-based component index.
        position: usize,
        /// The byte found.
        byte: u8,
    },
    /// A string component is not UTF-8.
    #[error("key component {position}: string is not UTF-8")]
    InvalidUtf8 {
        /// Zero-based component index.
        position: usize,
    },
    /// Bytes remain after the last component.
    #[error("{0} bytes remain after the last key component")]
    TrailingBytes(usize),
}

/// Appends `value` in `direction` to `out`.
pub fn encode_value_into(value: &Value, direction: Direction, out: &mut Vec<u8>) {
    let start = out.len();
    match value {
        Value::Int32(v) => out.extend_from_slice(&((*v as u32) ^ (1 << 31)).to_be_bytes()),
        Value::Int64(v) | Value::Timestamp(v) => {
            out.extend_from_slice(&((*v as u64) ^ (1 << 63)).to_be_bytes());
        }
        Value::UInt32(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::UInt64(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::Float(v) => {
            let bits = canonical_f32(*v).to_bits();
            let ordered = if bits >> 31 == 1 {
                !bits
            } else {
                bits ^ (1 << 31)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::Double(v) => {
            let bits = canonical_f64(*v).to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(v) => escape_into(v.as_bytes(), out),
        Value::Bytes(v) => escape_into(v, out),
    }
    if direction == Direction::Desc {
        out[start..].iter_mut().for_each(|b| *b = !*b);
    }
}

/// Decodes one component of shape `part` (at index `position`, for errors) from the
/// front of `input`, advancing it.
pub fn decode_value(part: KeyPart, position: usize, input: &mut &[u8]) -> Result<Value, KeyError> {
    let invert = part.direction == Direction::Desc;
    let mask = if invert { 0xFF } else { 0 };
    let truncated = KeyError::Truncated {
        position,
        ty: part.ty,
    };
    let mut take = |n: usize| -> Result<Vec<u8>, KeyError> {
        if input.len() < n {
            return Err(truncated.clone());
        }
        let (head, rest) = input.split_at(n);
        *input = rest;
        Ok(head.iter().map(|b| b ^ mask).collect())
    };
    let fixed4 = |b: Vec<u8>| u32::from_be_bytes(b.try_into().expect("took 4 bytes"));
    let fixed8 = |b: Vec<u8>| u64::from_be_bytes(b.try_into().expect("took 8 bytes"));
    Ok(match part.ty {
        ScalarType::Int32 => Value::Int32((fixed4(take(4)?) ^ (1 << 31)) as i32),
        ScalarType::Int64 => Value::Int64((fixed8(take(8)?) ^ (1 << 63)) as i64),
        ScalarType::Timestamp => Value::Timestamp((fixed8(take(8)?) ^ (1 << 63)) as i64),
        ScalarType::UInt32 => Value::UInt32(fixed4(take(4)?)),
        ScalarType::UInt64 => Value::UInt64(fixed8(take(8)?)),
        ScalarType::Float => {
            let ordered = fixed4(take(4)?);
            let bits = if ordered >> 31 == 1 {
                ordered ^ (1 << 31)
            } else {
                !ordered
            };
            Value::Float(f32::from_bits(bits))
        }
        ScalarType::Double => {
            let ordered = fixed8(take(8)?);
            let bits = if ordered >> 63 == 1 {
                ordered ^ (1 << 63)
            } else {
                !ordered
            };
            Value::Double(f64::from_bits(bits))
        }
        ScalarType::Bool => match take(1)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            byte => return Err(KeyError::InvalidBool { position, byte }),
        },
        ScalarType::String => {
            let bytes =
                unescape(input, invert).map_err(|source| KeyError::Escape { position, source })?;
            Value::String(String::from_utf8(bytes).map_err(|_| KeyError::InvalidUtf8 { position })?)
        }
        ScalarType::Bytes => Value::Bytes(
            unescape(input, invert).map_err(|source| KeyError::Escape { position, source })?,
        ),
    })
}

/// Appends the encoding of `values` (shaped by `parts`) to `out`.
pub fn encode_tuple_into(
    parts: &[KeyPart],
    values: &[Value],
    out: &mut Vec<u8>,
) -> Result<(), KeyError> {
    if parts.len() != values.len() {
        return Err(KeyError::Arity {
            expected: parts.len(),
            found: values.len(),
        });
    }
    for (position, (part, value)) in parts.iter().zip(values).enumerate() {
        if value.scalar_type() != part.ty {
            return Err(KeyError::TypeMismatch {
                position,
                expected: part.ty,
                found: value.scalar_type(),
            });
        }
        encode_value_into(value, part.direction, out);
    }
    Ok(())
}

/// The encoding of `values` shaped by `parts`.
pub fn encode_tuple(parts: &[KeyPart], values: &[Value]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::new();
    encode_tuple_into(parts, values, &mut out)?;
    Ok(out)
}

/// Decodes a tuple of shape `parts` from the front of `input`, advancing it.
pub fn decode_tuple_prefix(parts: &[KeyPart], input: &mut &[u8]) -> Result<Vec<Value>, KeyError> {
    parts
        .iter()
        .enumerate()
        .map(|(position, part)| decode_value(*part, position, input))
        .collect()
}

/// Decodes exactly one tuple of shape `parts`: no bytes may remain.
pub fn decode_tuple(parts: &[KeyPart], bytes: &[u8]) -> Result<Vec<Value>, KeyError> {
    let mut input = bytes;
    let values = decode_tuple_prefix(parts, &mut input)?;
    if !input.is_empty() {
        return Err(KeyError::TrailingBytes(input.len()));
    }
    Ok(values)
}

/// SCATTER's two-byte prefix for an encoded root key: the top 16 bits of
/// XXH3-64 (seed 0) of the encoding. Stable across versions and platforms.
pub fn scatter_prefix(encoded_root_key: &[u8]) -> [u8; 2] {
    let hash = xxhash_rust::xxh3::xxh3_64(encoded_root_key);
    let bytes = hash.to_be_bytes();
    [bytes[0], bytes[1]]
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use megastore_rowstore::KeyRange;
    use proptest::prelude::*;

    use super::*;

    fn value_of(ty: ScalarType) -> BoxedStrategy<Value> {
        match ty {
            ScalarType::Int32 => any::<i32>().prop_map(Value::Int32).boxed(),
            ScalarType::Int64 => any::<i64>().prop_map(Value::Int64).boxed(),
            ScalarType::UInt32 => any::<u32>().prop_map(Value::UInt32).boxed(),
            ScalarType::UInt64 => any::<u64>().prop_map(Value::UInt64).boxed(),
            ScalarType::Float => prop_oneof![
                any::<f32>(),
                Just(f32::NAN),
                Just(-f32::NAN),
                Just(0.0f32),
                Just(-0.0f32),
                Just(f32::INFINITY),
                Just(f32::NEG_INFINITY)
            ]
            .prop_map(Value::Float)
            .boxed(),
            ScalarType::Double => prop_oneof![
                any::<f64>(),
                Just(f64::NAN),
                Just(-f64::NAN),
                Just(0.0f64),
                Just(-0.0f64),
                Just(f64::MIN_POSITIVE),
                Just(f64::INFINITY),
                Just(f64::NEG_INFINITY)
            ]
            .prop_map(Value::Double)
            .boxed(),
            ScalarType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
            ScalarType::String => "(\u{0}|a|b|\u{ff}|é|z){0,4}"
                .prop_map(Value::String)
                .boxed(),
            ScalarType::Bytes => proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()],
                0..5,
            )
            .prop_map(Value::Bytes)
            .boxed(),
            ScalarType::Timestamp => any::<i64>().prop_map(Value::Timestamp).boxed(),
        }
    }

    fn part() -> impl Strategy<Value = KeyPart> {
        (
            proptest::sample::select(ScalarType::ALL.to_vec()),
            any::<bool>(),
        )
            .prop_map(|(ty, desc)| KeyPart {
                ty,
                direction: if desc {
                    Direction::Desc
                } else {
                    Direction::Asc
                },
            })
    }

    /// A shape and two tuples of it.
    fn shape_and_two_tuples() -> impl Strategy<Value = (Vec<KeyPart>, Vec<Value>, Vec<Value>)> {
        proptest::collection::vec(part(), 1..4).prop_flat_map(|parts| {
            let tuple = parts.iter().map(|p| value_of(p.ty)).collect::<Vec<_>>();
            (Just(parts), tuple.clone(), tuple)
        })
    }

    fn tuple_cmp(parts: &[KeyPart], a: &[Value], b: &[Value]) -> Ordering {
        for ((part, x), y) in parts.iter().zip(a).zip(b) {
            let ord = x.key_cmp(y).expect("same types");
            let ord = if part.direction == Direction::Desc {
                ord.reverse()
            } else {
                ord
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn encoding_order_is_value_order((parts, a, b) in shape_and_two_tuples()) {
            let (ea, eb) = (encode_tuple(&parts, &a).unwrap(), encode_tuple(&parts, &b).unwrap());
            prop_assert_eq!(ea.cmp(&eb), tuple_cmp(&parts, &a, &b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn decode_inverts_encode((parts, a, _b) in shape_and_two_tuples()) {
            let decoded = decode_tuple(&parts, &encode_tuple(&parts, &a).unwrap()).unwrap();
            prop_assert_eq!(tuple_cmp(&parts, &a, &decoded), Ordering::Equal);
            // Canonical NaN aside, decoding is exact.
            let reencoded = encode_tuple(&parts, &decoded).unwrap();
            prop_assert_eq!(reencoded, encode_tuple(&parts, &a).unwrap());
        }

        #[test]
        fn a_tuple_prefix_range_holds_exactly_the_tuples_with_that_prefix((parts, a, b) in shape_and_two_tuples(), k in 0usize..4) {
            let k = k.min(parts.len());
            let prefix = encode_tuple(&parts[..k], &a[..k]).unwrap();
            let range = KeyRange::prefix(prefix);
            let same_prefix = tuple_cmp(&parts[..k], &a[..k], &b[..k]) == Ordering::Equal;
            prop_assert_eq!(range.contains(&encode_tuple(&parts, &b).unwrap()), same_prefix);
            prop_assert!(range.contains(&encode_tuple(&parts, &a).unwrap()));
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(parts in proptest::collection::vec(part(), 1..4),
                                                 bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            let _ = decode_tuple(&parts, &bytes);
        }
    }

    #[test]
    fn nan_sorts_after_infinity_and_negative_zero_before_zero() {
        let enc = |v: f64| {
            encode_tuple(&[KeyPart::asc(ScalarType::Double)], &[Value::Double(v)]).unwrap()
        };
        assert!(enc(f64::INFINITY) < enc(f64::NAN));
        assert_eq!(enc(-f64::NAN), enc(f64::NAN), "every NaN is stored as one");
        assert!(enc(-0.0) < enc(0.0));
        assert!(enc(f64::NEG_INFINITY) < enc(-1e300));
    }

    #[test]
    fn wrong_types_and_arity_are_errors() {
        let parts = [KeyPart::asc(ScalarType::Int64)];
        assert!(matches!(
            encode_tuple(&parts, &[]),
            Err(KeyError::Arity { .. })
        ));
        assert!(matches!(
            encode_tuple(&parts, &[Value::Int32(1)]),
            Err(KeyError::TypeMismatch { position: 0, .. })
        ));
        assert!(matches!(
            decode_tuple(&parts, &[1, 2]),
            Err(KeyError::Truncated { .. })
        ));
        let mut long = encode_tuple(&parts, &[Value::Int64(1)]).unwrap();
        long.push(9);
        assert_eq!(decode_tuple(&parts, &long), Err(KeyError::TrailingBytes(1)));
    }

    #[test]
    fn scatter_prefix_is_stable() {
        // Pinned: changing the hash would move every scattered row.
        assert_eq!(scatter_prefix(b""), [0x2d, 0x06]);
        assert_eq!(scatter_prefix(b"user-101"), scatter_prefix(b"user-101"));
    }
}
