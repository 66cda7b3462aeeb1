//! Every bound, direction and page size against a brute-force filter of the same rows.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::{IndexQuery, PageToken};
use crate::{Catalog, DecodedKey, Entity, EntityError, Value};

const SCHEMA: &str = "
CREATE SCHEMA T;
CREATE TABLE User { required int64 user_id; } PRIMARY KEY(user_id), ENTITY GROUP ROOT;
CREATE TABLE Item {
  required int64 user_id;
  required int32 item_id;
  required string name;
  required int64 score;
} PRIMARY KEY(user_id, item_id), IN TABLE User, ENTITY GROUP KEY(user_id) REFERENCES User;
CREATE LOCAL INDEX ItemsByScore ON Item(user_id, score DESC);
CREATE GLOBAL INDEX ItemsByName ON Item(name, score);
";

const SCORES: [i64; 5] = [-3, 0, 1, 2, 7];
const NAMES: [&str; 4] = ["a", "ab", "a\0", "b"];

fn catalog() -> Catalog {
    crate::compile("t.msdl", SCHEMA, None).expect("the test schema compiles")
}

/// Every index row of items of users 1 and 2, with each name and score.
fn index_rows(catalog: &Catalog) -> BTreeSet<Vec<u8>> {
    let mut rows = BTreeSet::new();
    let mut item = 0;
    for user in [1i64, 2] {
        for name in NAMES {
            for score in SCORES {
                item += 1;
                let entity = Entity::new("Item")
                    .set("user_id", user)
                    .set("item_id", item)
                    .set("name", name)
                    .set("score", score);
                let m = catalog.put_mutations(None, &entity, 0).unwrap();
                rows.extend(m.group.iter().chain(&m.global).map(|m| m.row.clone()));
            }
        }
    }
    rows
}

/// The index values of a row of `index`, or `None` for another row.
fn values_of(catalog: &Catalog, index: &str, row: &[u8]) -> Option<Vec<Value>> {
    let id = catalog.index(index).unwrap().id;
    match catalog.decode_row_key(row).unwrap() {
        DecodedKey::IndexEntry {
            index, values: v, ..
        } if index == id => Some(v),
        _ => None,
    }
}

fn score(v: &Value) -> i64 {
    match v {
        Value::Int64(v) => *v,
        other => panic!("not a score: {other:?}"),
    }
}

/// Whether score `v` lies within the bounds (all scores).
fn within(bound_low: &Bound<Value>, bound_high: &Bound<Value>, v: &Value) -> bool {
    let v = score(v);
    let low = match bound_low {
        Bound::Unbounded => true,
        Bound::Included(b) => v >= score(b),
        Bound::Excluded(b) => v > score(b),
    };
    let high = match bound_high {
        Bound::Unbounded => true,
        Bound::Included(b) => v <= score(b),
        Bound::Excluded(b) => v < score(b),
    };
    low && high
}

/// Runs `query` page by page over `rows` as a store would.
fn run(catalog: &Catalog, rows: &BTreeSet<Vec<u8>>, query: &IndexQuery) -> Vec<Vec<u8>> {
    let mut query = query.clone();
    let mut found = Vec::new();
    for _ in 0..1_000 {
        let (_, range) = catalog.index_query_rows(&query).unwrap();
        let mut read: Vec<Vec<u8>> = rows.iter().filter(|r| range.contains(r)).cloned().collect();
        if query.reverse {
            read.reverse();
        }
        read.truncate(query.rows_asked().unwrap_or(usize::MAX));
        let read = read
            .into_iter()
            .map(|key| megastore_rowstore::Row {
                key,
                cells: Default::default(),
            })
            .collect();
        let (page, next) = query.page_of(read);
        found.extend(page.into_iter().map(|r| r.key));
        match next {
            Some(token) => query.page = Some(token),
            None => return found,
        }
    }
    panic!("paging did not end");
}

fn bounds() -> Vec<Bound<Value>> {
    let mut all = vec![Bound::Unbounded];
    for v in [-4i64, -3, 1, 5, 7, 8] {
        all.push(Bound::Included(Value::Int64(v)));
        all.push(Bound::Excluded(Value::Int64(v)));
    }
    all
}

/// For each index (ascending and descending range column), each pair of bounds, both
/// directions and several page sizes: the rows read are exactly those whose values
/// match, in index order (or its reverse).
#[test]
fn a_range_reads_exactly_the_matching_entries_in_order_page_by_page() {
    let catalog = catalog();
    let rows = index_rows(&catalog);
    let cases = [
        ("ItemsByScore", vec![Value::Int64(1)]),
        ("ItemsByName", vec![Value::String("a".into())]),
        ("ItemsByName", vec![Value::String("a\0".into())]),
    ];
    for (index, equal) in cases {
        for lower in bounds() {
            for upper in bounds() {
                let mut expected: Vec<Vec<u8>> = rows
                    .iter()
                    .filter(|r| {
                        values_of(&catalog, index, r).is_some_and(|v| {
                            v[..equal.len()] == equal[..] && within(&lower, &upper, &v[equal.len()])
                        })
                    })
                    .cloned()
                    .collect();
                for reverse in [false, true] {
                    if reverse {
                        expected.reverse();
                    }
                    for limit in [None, Some(1), Some(2), Some(7)] {
                        let query = IndexQuery {
                            index: index.into(),
                            equal: equal.clone(),
                            lower: lower.clone(),
                            upper: upper.clone(),
                            reverse,
                            limit,
                            page: None,
                        };
                        assert_eq!(
                            run(&catalog, &rows, &query),
                            expected,
                            "{index} {equal:?} {lower:?}..{upper:?} reverse {reverse} limit {limit:?}"
                        );
                    }
                }
            }
        }
    }
}

/// The descending index reads its largest scores first; the ascending one its smallest.
#[test]
fn index_order_follows_each_column_direction() {
    let catalog = catalog();
    let rows = index_rows(&catalog);
    let scores = |index: &str, equal: Value| {
        run(&catalog, &rows, &IndexQuery::new(index).equal([equal]))
            .iter()
            .filter_map(|r| values_of(&catalog, index, r))
            .map(|v| score(v.last().unwrap()))
            .collect::<Vec<_>>()
    };
    let by_score = scores("ItemsByScore", Value::Int64(2));
    assert!(by_score.windows(2).all(|w| w[0] >= w[1]), "{by_score:?}");
    let by_name = scores("ItemsByName", Value::String("b".into()));
    assert!(by_name.windows(2).all(|w| w[0] <= w[1]), "{by_name:?}");
    assert_eq!(by_name.len(), 2 * SCORES.len());
}

#[test]
fn bad_queries_name_the_index_and_what_is_wrong() {
    let catalog = catalog();
    let message = |q: IndexQuery| match catalog.index_query_rows(&q) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{q:?} was accepted"),
    };
    assert_eq!(
        message(IndexQuery::new("ItemsByName").equal(["a"]).at_least("x")),
        "query of index `ItemsByName`: the range on `score` needs int64 values, got string"
    );
    assert_eq!(
        message(
            IndexQuery::new("ItemsByName")
                .equal([Value::from("a"), Value::Int64(1)])
                .at_least(1i64)
        ),
        "query of index `ItemsByName`: a range needs a column after the 2 equal values, and the index has 2"
    );
    assert_eq!(
        message(IndexQuery::new("ItemsByName").limit(0)),
        "query of index `ItemsByName`: a page holds at least one entry: give a limit of 1 or more"
    );
    let other = catalog
        .index_query_rows(&IndexQuery::new("ItemsByName").equal(["b"]))
        .unwrap()
        .1
        .start;
    assert_eq!(
        message(
            IndexQuery::new("ItemsByName")
                .equal(["a"])
                .after(PageToken::from_bytes(other))
        ),
        "query of index `ItemsByName`: the page token belongs to another query"
    );
    assert!(matches!(
        catalog.index_query_rows(&IndexQuery::new("Nope")),
        Err(EntityError::UnknownIndex(_))
    ));
    assert!(matches!(
        catalog.index_query_rows(&IndexQuery::new("ItemsByScore")),
        Err(EntityError::Key { .. })
    ));
}
