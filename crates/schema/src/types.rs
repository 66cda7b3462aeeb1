//! Property types and values.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The scalar types a property can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalarType {
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 32-bit integer.
    UInt32,
    /// Unsigned 64-bit integer.
    UInt64,
    /// IEEE 754 single precision.
    Float,
    /// IEEE 754 double precision.
    Double,
    /// `true` or `false`.
    Bool,
    /// UTF-8 text.
    String,
    /// Arbitrary bytes.
    Bytes,
    /// Microseconds since the Unix epoch (signed).
    Timestamp,
}

impl ScalarType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [ScalarType; 10] = [
        ScalarType::Int32,
        ScalarType::Int64,
        ScalarType::UInt32,
        ScalarType::UInt64,
        ScalarType::Float,
        ScalarType::Double,
        ScalarType::Bool,
        ScalarType::String,
        ScalarType::Bytes,
        ScalarType::Timestamp,
    ];

    /// The type's name in the schema language.
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Int32 => "int32",
            ScalarType::Int64 => "int64",
            ScalarType::UInt32 => "uint32",
            ScalarType::UInt64 => "uint64",
            ScalarType::Float => "float",
            ScalarType::Double => "double",
            ScalarType::Bool => "bool",
            ScalarType::String => "string",
            ScalarType::Bytes => "bytes",
            ScalarType::Timestamp => "timestamp",
        }
    }

    /// The type named `name` in the schema language (exact, lowercase).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// A value of this type from text, as a person types it: integers and floats in
    /// decimal, `true`/`false`, strings as they are, bytes as `0x` and hex digits (or as
    /// text), timestamps as microseconds since the Unix epoch.
    pub fn parse_value(self, text: &str) -> Result<Value, String> {
        let bad = |e: &dyn fmt::Display| format!("{text:?} is not a valid {}: {e}", self.name());
        Ok(match self {
            ScalarType::Int32 => Value::Int32(text.parse().map_err(|e| bad(&e))?),
            ScalarType::Int64 => Value::Int64(text.parse().map_err(|e| bad(&e))?),
            ScalarType::UInt32 => Value::UInt32(text.parse().map_err(|e| bad(&e))?),
            ScalarType::UInt64 => Value::UInt64(text.parse().map_err(|e| bad(&e))?),
            ScalarType::Float => Value::Float(text.parse().map_err(|e| bad(&e))?),
            ScalarType::Double => Value::Double(text.parse().map_err(|e| bad(&e))?),
            ScalarType::Bool => Value::Bool(text.parse().map_err(|e| bad(&e))?),
            ScalarType::String => Value::String(text.to_string()),
            ScalarType::Timestamp => Value::Timestamp(text.parse().map_err(|e| bad(&e))?),
            ScalarType::Bytes => match text.strip_prefix("0x") {
                Some(hex) if hex.len() % 2 == 0 => Value::Bytes(
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| {
                            hex.get(i..i + 2)
                                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                        })
                        .collect::<Option<Vec<u8>>>()
                        .ok_or_else(|| bad(&"invalid hex digits"))?,
                ),
                Some(_) => return Err(bad(&"an odd number of hex digits")),
                None => Value::Bytes(text.as_bytes().to_vec()),
            },
        })
    }

    /// Whether a primary-key component may have this type. Floating-point values make
    /// poor identities (`-0` vs `+0`, NaN), so keys use integers, strings or bytes;
    /// indexes may still order by floats.
    pub fn can_be_primary_key(self) -> bool {
        !matches!(self, ScalarType::Float | ScalarType::Double)
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Ascending or descending order of a key component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Smallest first (the default).
    #[default]
    Asc,
    /// Largest first.
    Desc,
}

/// Whether a property must be present, may be absent, or holds a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// Exactly one value.
    Required,
    /// Zero or one value.
    Optional,
    /// Zero or more values.
    Repeated,
}

impl Label {
    /// The label's keyword in the schema language.
    pub fn name(self) -> &'static str {
        match self {
            Label::Required => "required",
            Label::Optional => "optional",
            Label::Repeated => "repeated",
        }
    }
}

/// One scalar value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum Value {
    /// An `int32`.
    Int32(i32),
    /// An `int64`.
    Int64(i64),
    /// A `uint32`.
    UInt32(u32),
    /// A `uint64`.
    UInt64(u64),
    /// A `float`.
    Float(f32),
    /// A `double`.
    Double(f64),
    /// A `bool`.
    Bool(bool),
    /// A `string`.
    String(String),
    /// A `bytes`.
    Bytes(Vec<u8>),
    /// A `timestamp`: microseconds since the Unix epoch.
    Timestamp(i64),
}

impl Value {
    /// The value's type.
    pub fn scalar_type(&self) -> ScalarType {
        match self {
            Value::Int32(_) => ScalarType::Int32,
            Value::Int64(_) => ScalarType::Int64,
            Value::UInt32(_) => ScalarType::UInt32,
            Value::UInt64(_) => ScalarType::UInt64,
            Value::Float(_) => ScalarType::Float,
            Value::Double(_) => ScalarType::Double,
            Value::Bool(_) => ScalarType::Bool,
            Value::String(_) => ScalarType::String,
            Value::Bytes(_) => ScalarType::Bytes,
            Value::Timestamp(_) => ScalarType::Timestamp,
        }
    }

    /// The order keys give two values of the same type (`None` across types).
    /// Floats follow IEEE total order, with every NaN treated as one positive NaN
    /// that sorts after `+inf`.
    pub fn key_cmp(&self, other: &Value) -> Option<Ordering> {
        Some(match (self, other) {
            (Value::Int32(a), Value::Int32(b)) => a.cmp(b),
            (Value::Int64(a), Value::Int64(b)) => a.cmp(b),
            (Value::UInt32(a), Value::UInt32(b)) => a.cmp(b),
            (Value::UInt64(a), Value::UInt64(b)) => a.cmp(b),
            (Value::Float(a), Value::Float(b)) => canonical_f32(*a).total_cmp(&canonical_f32(*b)),
            (Value::Double(a), Value::Double(b)) => canonical_f64(*a).total_cmp(&canonical_f64(*b)),
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::String(a), Value::String(b)) => a.cmp(b),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            _ => return None,
        })
    }
}

/// Every NaN becomes the one positive quiet NaN keys store.
pub(crate) fn canonical_f32(x: f32) -> f32 {
    if x.is_nan() { f32::NAN } else { x }
}

/// Every NaN becomes the one positive quiet NaN keys store.
pub(crate) fn canonical_f64(x: f64) -> f64 {
    if x.is_nan() { f64::NAN } else { x }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int32(v) => write!(f, "{v}"),
            Value::Int64(v) => write!(f, "{v}"),
            Value::UInt32(v) => write!(f, "{v}"),
            Value::UInt64(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Double(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "b\"{}\"", v.escape_ascii()),
            Value::Timestamp(v) => write!(f, "@{v}us"),
        }
    }
}

macro_rules! value_from {
    ($($rust:ty => $variant:ident),* $(,)?) => {
        $(impl From<$rust> for Value {
            fn from(v: $rust) -> Self {
                Value::$variant(v.into())
            }
        })*
    };
}

value_from!(i32 => Int32, i64 => Int64, u32 => UInt32, u64 => UInt64, f32 => Float, f64 => Double,
            bool => Bool, String => String, &str => String, Vec<u8> => Bytes, &[u8] => Bytes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_text_parses_into_values_of_its_type() {
        let ok = |ty: ScalarType, text: &str| ty.parse_value(text).unwrap();
        assert_eq!(ok(ScalarType::Int32, "-7"), Value::Int32(-7));
        assert_eq!(
            ok(ScalarType::UInt64, "18446744073709551615"),
            Value::UInt64(u64::MAX)
        );
        assert_eq!(ok(ScalarType::Double, "2.5"), Value::Double(2.5));
        assert_eq!(ok(ScalarType::Bool, "true"), Value::Bool(true));
        assert_eq!(ok(ScalarType::String, "a b"), Value::String("a b".into()));
        assert_eq!(ok(ScalarType::Bytes, "0x00ff"), Value::Bytes(vec![0, 255]));
        assert_eq!(ok(ScalarType::Bytes, "ab"), Value::Bytes(b"ab".to_vec()));
        assert_eq!(
            ok(ScalarType::Timestamp, "1700000000000000"),
            Value::Timestamp(1_700_000_000_000_000)
        );
    }

    #[test]
    fn mistyped_text_names_the_type() {
        for (ty, text) in [
            (ScalarType::Int32, "x"),
            (ScalarType::UInt32, "-1"),
            (ScalarType::Bool, "yes"),
            (ScalarType::Bytes, "0xabc"),
            (ScalarType::Bytes, "0xzz"),
        ] {
            let error = ty.parse_value(text).unwrap_err();
            assert!(error.contains(ty.name()) && error.contains(text), "{error}");
        }
    }
}
