//! What can be wrong with a message from the wire.

/// A message that does not describe a valid protocol value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A field the value needs is absent (a oneof with no case set counts).
    #[error("{0} is missing")]
    Missing(&'static str),
    /// A number does not fit the field's type.
    #[error("{field} is out of range: {value}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// What was sent.
        value: u64,
    },
    /// A value breaks a rule of its type.
    #[error("{field}: {why}")]
    Invalid {
        /// The field, with its index in a list.
        field: String,
        /// The rule.
        why: &'static str,
    },
}

/// The field's value, or [`WireError::Missing`].
pub(crate) fn required<T>(value: Option<T>, field: &'static str) -> Result<T, WireError> {
    value.ok_or(WireError::Missing(field))
}

/// Narrows a wire integer, or [`WireError::OutOfRange`].
pub(crate) fn narrow<T: TryFrom<u64>>(value: u64, field: &'static str) -> Result<T, WireError> {
    T::try_from(value).map_err(|_| WireError::OutOfRange { field, value })
}
