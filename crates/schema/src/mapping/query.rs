//! Index queries: which rows of an index a query reads, in which order, and where its
//! next page starts.
//!
//! A query fixes the index's leading values (`equal`), may bound the next column
//! (`lower`, `upper`, each inclusive or exclusive, in that column's values — a
//! descending column's lower bound is still its smallest value), and reads in index
//! order or in reverse. What it reads is one contiguous key range, because the key
//! codec is order-preserving and self-delimiting (crate::key): every entry whose next
//! value is `v` lies in `[p ‖ enc(v), successor(p ‖ enc(v)))`, `p` the equal prefix.
//!
//! A page ends with a [`PageToken`]: the row key of the last entry it returned. The next
//! page reads strictly past it in the query's direction; a token outside the query's
//! range is refused, so a token cannot widen a query.

use std::ops::Bound;

use megastore_rowstore::{KeyRange, Row, prefix_successor};

use super::entity::EntityError;
use crate::catalog::{Catalog, Index};
use crate::types::{Direction, Value};

/// A query of one index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexQuery {
    /// The index's name.
    pub index: String,
    /// Values of its leading columns (a local or inline index: at least the group key).
    pub equal: Vec<Value>,
    /// The smallest value of the next column.
    pub lower: Bound<Value>,
    /// The largest value of the next column.
    pub upper: Bound<Value>,
    /// Against index order.
    pub reverse: bool,
    /// At most this many entries per page.
    pub limit: Option<usize>,
    /// Continue after the page this token ended.
    pub page: Option<PageToken>,
}

/// Where the next page of an index query starts: the row key of the last entry a page
/// returned. Opaque to applications; valid only for the query that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageToken(Vec<u8>);

impl PageToken {
    /// A token as a client sent it back.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// Its bytes, to send to a client.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl IndexQuery {
    /// Every entry of `index`, in index order.
    pub fn new(index: impl Into<String>) -> Self {
        Self {
            index: index.into(),
            equal: Vec::new(),
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            reverse: false,
            limit: None,
            page: None,
        }
    }

    /// Only entries whose leading values are `values`.
    pub fn equal<V: Into<Value>>(mut self, values: impl IntoIterator<Item = V>) -> Self {
        self.equal = values.into_iter().map(Into::into).collect();
        self
    }

    /// The next column at least `value`.
    pub fn at_least(mut self, value: impl Into<Value>) -> Self {
        self.lower = Bound::Included(value.into());
        self
    }

    /// The next column greater than `value`.
    pub fn greater_than(mut self, value: impl Into<Value>) -> Self {
        self.lower = Bound::Excluded(value.into());
        self
    }

    /// The next column at most `value`.
    pub fn at_most(mut self, value: impl Into<Value>) -> Self {
        self.upper = Bound::Included(value.into());
        self
    }

    /// The next column less than `value`.
    pub fn less_than(mut self, value: impl Into<Value>) -> Self {
        self.upper = Bound::Excluded(value.into());
        self
    }

    /// Against index order.
    pub fn reversed(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// At most `limit` entries per page.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The page after the one that ended with `token`.
    pub fn after(mut self, token: PageToken) -> Self {
        self.page = Some(token);
        self
    }

    /// How many rows to read for one page: one more than the limit, to know whether
    /// another page follows.
    pub fn rows_asked(&self) -> Option<usize> {
        self.limit.map(|l| l.saturating_add(1))
    }

    /// One page of the rows read (at most [`IndexQuery::rows_asked`], in the query's
    /// order), and the token of the next page if more rows followed.
    pub fn page_of(&self, mut rows: Vec<Row>) -> (Vec<Row>, Option<PageToken>) {
        match self.limit {
            Some(limit) if rows.len() > limit => {
                rows.truncate(limit);
                // A limit is at least 1 (`index_query_rows` refuses 0): a row is left.
                let last = rows.last().map(|r| PageToken(r.key.clone()));
                (rows, last)
            }
            _ => (rows, None),
        }
    }
}

impl Catalog {
    /// The index a query names, and the rows it reads (its page token applied).
    pub fn index_query_rows<'c>(
        &'c self,
        query: &IndexQuery,
    ) -> Result<(&'c Index, KeyRange), EntityError> {
        let index = self.require_index(&query.index)?;
        if !index.state.is_ready() {
            return Err(EntityError::Query {
                index: index.name.clone(),
                detail: "it is being backfilled (its entries for entities written before it \
                         was added are not all there yet): scans wait until \
                         `megastore schema backfill` finishes"
                    .into(),
            });
        }
        if query.limit == Some(0) {
            return Err(EntityError::Query {
                index: index.name.clone(),
                detail: "a page holds at least one entry: give a limit of 1 or more".into(),
            });
        }
        let prefix = self.index_prefix(index, &query.equal)?;
        let whole = KeyRange::prefix(prefix.clone());
        let mut range = if query.lower == Bound::Unbounded && query.upper == Bound::Unbounded {
            whole.clone()
        } else {
            self.bounded(index, query, &prefix, &whole)?
        };
        if let Some(PageToken(last)) = &query.page {
            if !range.contains(last) {
                return Err(EntityError::Query {
                    index: index.name.clone(),
                    detail: "the page token belongs to another query".into(),
                });
            }
            if query.reverse {
                range.end = Some(last.clone());
            } else {
                range.start = [last.as_slice(), &[0]].concat();
            }
        }
        if range.end.as_ref().is_some_and(|end| *end < range.start) {
            range.end = Some(range.start.clone());
        }
        Ok((index, range))
    }

    /// The rows of `whole` whose next column lies within the query's bounds.
    fn bounded(
        &self,
        index: &Index,
        query: &IndexQuery,
        prefix: &[u8],
        whole: &KeyRange,
    ) -> Result<KeyRange, EntityError> {
        let refuse = |detail: String| EntityError::Query {
            index: index.name.clone(),
            detail,
        };
        let parts = self.index_parts(index);
        let at = query.equal.len();
        let Some(part) = parts.get(at) else {
            return Err(refuse(format!(
                "a range needs a column after the {at} equal values, and the index has {}",
                parts.len()
            )));
        };
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        let column = &table.column_by_id(index.columns[at].column).name;
        // The first key of the entries whose next value is `v`, and the first past them.
        let first_of = |v: &Value| {
            if v.scalar_type() != part.ty {
                return Err(refuse(format!(
                    "the range on `{column}` needs {} values, got {}",
                    part.ty,
                    v.scalar_type()
                )));
            }
            let mut key = prefix.to_vec();
            crate::key::encode_value_into(v, part.direction, &mut key);
            Ok(key)
        };
        let past = |v: &Value| {
            Ok(prefix_successor(&first_of(v)?)
                .expect("an index key starts with an object id or 0xFD, never with 0xFF"))
        };
        // A descending column stores its largest values first: its lower bound limits
        // the end of the key range, its upper bound the start.
        let (from, to) = match part.direction {
            Direction::Asc => (&query.lower, &query.upper),
            Direction::Desc => (&query.upper, &query.lower),
        };
        let start = match from {
            Bound::Unbounded => whole.start.clone(),
            Bound::Included(v) => first_of(v)?,
            Bound::Excluded(v) => past(v)?,
        };
        let end = match to {
            Bound::Unbounded => whole.end.clone(),
            Bound::Included(v) => Some(past(v)?),
            Bound::Excluded(v) => Some(first_of(v)?),
        };
        Ok(KeyRange { start, end })
    }
}

#[cfg(test)]
mod tests;
