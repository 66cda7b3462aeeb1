//! The merge-join's walk over several global indexes, on rows in a map.

use megastore_rowstore::{Cell, Mutation, Row, RowMutation};
use megastore_schema::{Catalog, Entity};

/// The row a mutation writes, as its cell sets leave it (its deletes left out).
fn written_row(mutation: &RowMutation) -> Row {
    let mut row = Row {
        key: mutation.row.clone(),
        cells: Default::default(),
    };
    for m in &mutation.mutations {
        if let Mutation::Set {
            column,
            timestamp,
            value,
        } = m
        {
            let cell = Cell {
                timestamp: *timestamp,
                value: value.clone(),
            };
            row.cells.insert(column.clone(), cell);
        }
    }
    row
}

fn catalog() -> Catalog {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/photos.msdl");
    let text = std::fs::read_to_string(path).expect("the photo schema");
    megastore_schema::compile("photos.msdl", &text, None).expect("it compiles")
}

fn photo(tags: &[&str], thumbnail: &str) -> Entity {
    Entity::new("Photo")
        .set("user_id", 7i64)
        .set("photo_id", 1i32)
        .set("time", 1i64)
        .set("full_url", "f")
        .set("thumbnail_url", thumbnail)
        .set_repeated("tag", tags.iter().copied())
}

/// Global index rows in a map: what a replica that applied every photo holds.
struct Applied(std::collections::BTreeMap<Vec<u8>, megastore_rowstore::Row>);

impl super::GlobalRows for Applied {
    async fn global_rows(
        &self,
        range: megastore_rowstore::KeyRange,
        limit: usize,
    ) -> Result<Vec<megastore_rowstore::Row>, crate::ClientError> {
        Ok(self
            .0
            .range(range.start.clone()..)
            .take_while(|(k, _)| range.contains(k))
            .take(limit)
            .map(|(_, row)| row.clone())
            .collect())
    }
}

/// Photos of several users, photo `i` tagged by the divisors of `i` among 2, 3 and 5
/// (and `all`): enough entries for several of the join's pages per tag.
/// A photo's user, id and tags.
type Tagged = (i64, i32, Vec<&'static str>);

fn tagged_photos(catalog: &Catalog) -> (Applied, Vec<Tagged>) {
    let mut rows = std::collections::BTreeMap::new();
    let mut photos = Vec::new();
    for i in 1..=400i32 {
        let user = i64::from(i % 7);
        let mut tags = vec!["all"];
        for (d, tag) in [(2, "two"), (3, "three"), (5, "five")] {
            if i % d == 0 {
                tags.push(tag);
            }
        }
        let entity = photo(&tags, "t").set("user_id", user).set("photo_id", i);
        for m in catalog.put_mutations(None, &entity, 0).unwrap().global {
            rows.insert(m.row.clone(), written_row(&m));
        }
        photos.push((user, i, tags));
    }
    (Applied(rows), photos)
}

fn join(
    applied: &Applied,
    catalog: &Catalog,
    tags: &[&str],
    limit: Option<usize>,
) -> Vec<(i64, i32)> {
    let queries: Vec<_> = tags
        .iter()
        .map(|t| megastore_schema::IndexQuery::new("PhotosByTag").equal([*t]))
        .collect();
    let mut found = Vec::new();
    let mut after = None;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for _ in 0..1_000 {
        let (hits, next) = runtime
            .block_on(super::zig_zag(
                applied,
                catalog,
                &queries,
                limit,
                after.as_ref(),
            ))
            .unwrap();
        for hit in hits.iter().map(|j| &j.hit) {
            assert_eq!(hit.entries.len(), tags.len());
            for (entry, tag) in hit.entries.iter().zip(tags) {
                assert_eq!(entry.values, vec![megastore_schema::Value::from(*tag)]);
                assert_eq!(entry.primary_key, hit.primary_key);
            }
            let [
                megastore_schema::Value::Int64(user),
                megastore_schema::Value::Int32(id),
            ] = hit.primary_key[..]
            else {
                panic!("{:?}", hit.primary_key);
            };
            found.push((user, id));
        }
        match next {
            Some(token) => after = Some(token),
            None => return found,
        }
    }
    panic!("the join's pages did not end");
}

/// A merge-join finds exactly the photos with every tag, in primary key order, page
/// after page, however the tags' entries interleave across the join's read pages.
#[test]
fn a_merge_join_finds_exactly_the_entities_with_every_value() {
    let catalog = catalog();
    let (applied, photos) = tagged_photos(&catalog);
    for tags in [
        vec!["two", "three"],
        vec!["two", "three", "five"],
        vec!["five", "all"],
        vec!["three"],
        vec!["two", "none"],
    ] {
        let mut expected: Vec<(i64, i32)> = photos
            .iter()
            .filter(|(_, _, has)| tags.iter().all(|t| has.contains(t)))
            .map(|(user, id, _)| (*user, *id))
            .collect();
        expected.sort();
        for limit in [None, Some(1), Some(5), Some(64)] {
            assert_eq!(
                join(&applied, &catalog, &tags, limit),
                expected,
                "{tags:?}, limit {limit:?}"
            );
        }
    }
}

#[test]
fn a_merge_join_refuses_queries_it_cannot_run_in_key_order() {
    let catalog = catalog();
    let refused = |queries: &[megastore_schema::IndexQuery]| {
        super::join_table(&catalog, queries)
            .unwrap_err()
            .to_string()
    };
    let tag = |t: &str| megastore_schema::IndexQuery::new("PhotosByTag").equal([t]);
    assert!(refused(&[]).contains("at least one"));
    assert!(
        refused(&[tag("a"), megastore_schema::IndexQuery::new("PhotosByTag")])
            .contains("give a value for each")
    );
    assert!(refused(&[tag("a"), tag("b").limit(3)]).contains("equal values only"));
    assert!(
        refused(&[
            tag("a"),
            megastore_schema::IndexQuery::new("PhotosByTime").equal([1i64])
        ])
        .contains("LOCAL index")
    );
}
