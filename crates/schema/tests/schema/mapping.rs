//! Entity ↔ row mapping on the paper's photo schema, against the in-memory store.

use megastore_rowstore::{
    Durability, KeyRange, LATEST, MemoryStore, RowRead, RowStore, ScanOptions,
};
use megastore_schema::{
    Catalog, DecodedKey, Entity, EntityError, EntityMutations, FieldValue, Value,
};
use proptest::prelude::*;

use super::example;

fn user(id: i64, name: &str) -> Entity {
    Entity::new("User").set("user_id", id).set("name", name)
}

fn photo(user: i64, id: i32, time: i64, tags: &[&str]) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", time)
        .set("full_url", format!("https://p/{user}/{id}"))
        .set_repeated("tag", tags.iter().copied())
}

/// Applies one entity write: group rows atomically within the group's range.
fn apply(store: &MemoryStore, c: &Catalog, group_root: i64, m: &EntityMutations) {
    let range = c
        .group_range(c.table("User").unwrap(), &[group_root.into()])
        .unwrap();
    store
        .mutate_rows(&range, &m.group, Durability::Synced)
        .unwrap();
    store
        .mutate_rows(&KeyRange::all(), &m.global, Durability::Synced)
        .unwrap();
}

fn read(store: &MemoryStore, c: &Catalog, table: &str, key: &[Value], at: u64) -> Option<Entity> {
    let row_key = c.entity_row_key(c.table(table).unwrap(), key).unwrap();
    let row = store.read_row(&row_key, &KeyRange::all(), at).unwrap()?;
    c.entity_from_row(&row).unwrap()
}

fn index_entries(
    store: &MemoryStore,
    c: &Catalog,
    index: &str,
    leading: &[Value],
    at: u64,
) -> Vec<megastore_schema::IndexEntry> {
    let range = c.index_range(c.index(index).unwrap(), leading).unwrap();
    let rows = store.scan(&range, at, &ScanOptions::default()).unwrap();
    rows.iter()
        .filter_map(|r| c.index_entry_from_row(r).unwrap())
        .collect()
}

#[test]
fn entities_round_trip_through_rows() {
    let c = example("photos.msdl");
    let store = MemoryStore::new();
    let u = user(101, "John");
    let p = photo(101, 500, 1230, &["Dinner", "Paris"]).set("thumbnail_url", "t500");
    apply(&store, &c, 101, &c.put_mutations(None, &u, 1).unwrap());
    apply(&store, &c, 101, &c.put_mutations(None, &p, 2).unwrap());
    assert_eq!(read(&store, &c, "User", &[101i64.into()], LATEST), Some(u));
    assert_eq!(
        read(&store, &c, "Photo", &[101i64.into(), 500i32.into()], LATEST),
        Some(p)
    );
    assert_eq!(
        read(&store, &c, "Photo", &[101i64.into(), 500i32.into()], 1),
        None,
        "not yet written at 1"
    );
}

#[test]
fn cells_are_named_table_dot_property_and_key_properties_stay_in_the_key() {
    let c = example("photos.msdl");
    let m = c
        .put_mutations(None, &photo(101, 500, 1230, &["Paris"]), 7)
        .unwrap();
    let columns: Vec<String> = m.group[0]
        .mutations
        .iter()
        .map(|m| String::from_utf8(m.column().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(
        columns,
        ["Photo", "Photo.time", "Photo.full_url", "Photo.tag"]
    );
}

#[test]
fn deleting_an_entity_deletes_its_columns_as_of_the_write_not_its_row() {
    let c = example("photos.msdl");
    let store = MemoryStore::new();
    let u = user(7, "Mary");
    let p = photo(7, 1, 10, &["a", "b"]);
    apply(&store, &c, 7, &c.put_mutations(None, &u, 1).unwrap());
    apply(&store, &c, 7, &c.put_mutations(None, &p, 2).unwrap());
    let delete_user = c.delete_mutations(&u, 3).unwrap();
    assert!(
        delete_user.group[0]
            .mutations
            .iter()
            .all(|m| matches!(m, megastore_rowstore::Mutation::DeleteColumn { .. }))
    );
    apply(&store, &c, 7, &delete_user);
    apply(&store, &c, 7, &c.delete_mutations(&p, 3).unwrap());
    assert_eq!(read(&store, &c, "User", &[7i64.into()], LATEST), None);
    assert_eq!(
        read(&store, &c, "User", &[7i64.into()], 2),
        Some(u),
        "older snapshots still see it"
    );
    assert_eq!(
        read(&store, &c, "Photo", &[7i64.into(), 1i32.into()], 2),
        Some(p)
    );
    assert!(index_entries(&store, &c, "PhotosByTime", &[7i64.into()], LATEST).is_empty());
    assert_eq!(
        index_entries(&store, &c, "PhotosByTime", &[7i64.into()], 2).len(),
        1
    );
    assert!(index_entries(&store, &c, "PhotosByTag", &[], LATEST).is_empty());
    // The root row stays writable in place: other cells (the log) live there too.
    let root_row = c
        .entity_row_key(c.table("User").unwrap(), &[7i64.into()])
        .unwrap();
    store
        .mutate_row(
            &megastore_rowstore::RowMutation::new(root_row.clone()).set(
                b"log:1".to_vec(),
                0,
                b"entry".to_vec(),
            ),
            None,
            Durability::Synced,
        )
        .unwrap();
    let row = store
        .read_row(&root_row, &KeyRange::all(), LATEST)
        .unwrap()
        .unwrap();
    assert_eq!(
        c.entity_from_row(&row).unwrap(),
        None,
        "the log cell is not an entity"
    );
}

#[test]
fn a_repeated_index_has_one_entry_per_distinct_element_and_follows_updates() {
    let c = example("photos.msdl");
    let store = MemoryStore::new();
    let v1 = photo(1, 1, 10, &["Paris", "Dinner", "Paris"]).set("thumbnail_url", "thumb-1");
    apply(&store, &c, 1, &c.put_mutations(None, &v1, 1).unwrap());
    let entries = index_entries(&store, &c, "PhotosByTag", &[], LATEST);
    let tags: Vec<&Value> = entries.iter().map(|e| &e.values[0]).collect();
    assert_eq!(tags, [&Value::from("Dinner"), &Value::from("Paris")]);
    assert!(
        entries
            .iter()
            .all(|e| e.stored.get("thumbnail_url") == Some(&FieldValue::Single("thumb-1".into())))
    );
    assert!(
        entries
            .iter()
            .all(|e| e.primary_key == vec![Value::from(1i64), Value::from(1i32)])
    );

    // Drop a tag, change the stored thumbnail away, move the photo in time.
    let v2 = photo(1, 1, 20, &["Paris", "Louvre"]);
    apply(&store, &c, 1, &c.put_mutations(Some(&v1), &v2, 2).unwrap());
    let entries = index_entries(&store, &c, "PhotosByTag", &[], LATEST);
    let tags: Vec<&Value> = entries.iter().map(|e| &e.values[0]).collect();
    assert_eq!(tags, [&Value::from("Louvre"), &Value::from("Paris")]);
    assert!(entries.iter().all(|e| e.stored.is_empty()), "{entries:?}");
    let by_time = index_entries(&store, &c, "PhotosByTime", &[1i64.into()], LATEST);
    assert_eq!(by_time.len(), 1);
    assert_eq!(
        by_time[0].values,
        vec![Value::from(1i64), Value::from(20i64)]
    );
    // The entity itself lost its thumbnail.
    assert_eq!(
        read(&store, &c, "Photo", &[1i64.into(), 1i32.into()], LATEST),
        Some(v2)
    );
}

#[test]
fn an_inline_index_reads_as_a_virtual_repeated_property_of_the_parent_newest_first() {
    let c = example("photos-inline.msdl");
    let store = MemoryStore::new();
    for (id, time) in [(1, 100i64), (2, 300), (3, 200)] {
        let p = photo(5, id, time, &[]).set("thumbnail_url", format!("t{id}"));
        apply(&store, &c, 5, &c.put_mutations(None, &p, 1).unwrap());
    }
    apply(
        &store,
        &c,
        6,
        &c.put_mutations(None, &photo(6, 1, 999, &[]), 1).unwrap(),
    );
    let of_user_5 = index_entries(&store, &c, "PhotosByTime", &[5i64.into()], LATEST);
    let times: Vec<&Value> = of_user_5.iter().map(|e| &e.values[1]).collect();
    assert_eq!(
        times,
        [
            &Value::from(300i64),
            &Value::from(200i64),
            &Value::from(100i64)
        ]
    );
    assert_eq!(
        of_user_5[0].stored.get("thumbnail_url"),
        Some(&FieldValue::Single("t2".into()))
    );
    // Stored inside user 5's entity group.
    let range = c
        .group_range(c.table("User").unwrap(), &[5i64.into()])
        .unwrap();
    assert!(
        range.contains(
            &c.index_range(c.index("PhotosByTime").unwrap(), &[5i64.into()])
                .unwrap()
                .start
        )
    );
}

#[test]
fn bad_entities_are_errors_naming_the_property() {
    let c = example("photos.msdl");
    let missing = Entity::new("Photo")
        .set("user_id", 1i64)
        .set("photo_id", 1i32);
    assert_eq!(
        c.put_mutations(None, &missing, 1).unwrap_err().to_string(),
        "`Photo.time` is required"
    );
    let wrong_type = user(1, "x").set("user_id", 1i32);
    assert_eq!(
        c.put_mutations(None, &wrong_type, 1)
            .unwrap_err()
            .to_string(),
        "`User.user_id` is int64, got int32"
    );
    let unknown = user(1, "x").set("age", 3i32);
    assert_eq!(
        c.put_mutations(None, &unknown, 1).unwrap_err().to_string(),
        "table `User` has no property `age`"
    );
    let single_for_repeated = photo(1, 1, 1, &[]).set("tag", "x");
    assert!(matches!(
        c.put_mutations(None, &single_for_repeated, 1),
        Err(EntityError::Cardinality { repeated: true, .. })
    ));
    let other = user(2, "x");
    assert!(matches!(
        c.put_mutations(Some(&user(1, "x")), &other, 1),
        Err(EntityError::DifferentEntity { .. })
    ));
    assert!(matches!(
        c.put_mutations(None, &Entity::new("Nope"), 1),
        Err(EntityError::UnknownTable(_))
    ));
}

#[test]
fn garbage_row_keys_and_cells_are_errors_not_panics() {
    let c = example("maps.msdl");
    for key in [&b""[..], b"\xff", b"\x01", b"\x01\x00\x00", b"\x63\x00"] {
        assert!(c.decode_row_key(key).is_err(), "{key:?}");
    }
    let patch = c.table("Patch").unwrap();
    let mut key = c
        .entity_row_key(patch, &[1i32.into(), 2i32.into()])
        .unwrap();
    key[1] ^= 0xFF; // break the scatter prefix
    assert!(
        c.decode_row_key(&key)
            .unwrap_err()
            .to_string()
            .contains("scatter prefix")
    );
    let mut row = megastore_rowstore::Row {
        key: c
            .entity_row_key(patch, &[1i32.into(), 2i32.into()])
            .unwrap(),
        cells: Default::default(),
    };
    row.cells.insert(
        b"Patch".to_vec(),
        megastore_rowstore::Cell {
            timestamp: 1,
            value: vec![],
        },
    );
    row.cells.insert(
        b"Patch.zoom".to_vec(),
        megastore_rowstore::Cell {
            timestamp: 1,
            value: vec![1, 2],
        },
    );
    assert!(
        c.entity_from_row(&row)
            .unwrap_err()
            .to_string()
            .contains("Patch.zoom")
    );
}

/// Every row one entity group's writes produce, for user `id` with the given photos.
fn group_rows(
    c: &Catalog,
    id: i64,
    photos: &[(i32, i64, Vec<String>)],
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut group = Vec::new();
    let mut global = Vec::new();
    let mut collect = |m: EntityMutations| {
        group.extend(m.group.into_iter().map(|r| r.row));
        global.extend(m.global.into_iter().map(|r| r.row));
    };
    collect(c.put_mutations(None, &user(id, "u"), 1).unwrap());
    for (pid, time, tags) in photos {
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        collect(
            c.put_mutations(None, &photo(id, *pid, *time, &tags), 1)
                .unwrap(),
        );
    }
    (group, global)
}

fn photos_strategy() -> impl Strategy<Value = Vec<(i32, i64, Vec<String>)>> {
    proptest::collection::vec(
        (
            any::<i32>(),
            any::<i64>(),
            proptest::collection::vec("[a-c\u{0}]{0,3}", 0..3),
        ),
        0..4,
    )
}

proptest! {
    #[test]
    fn every_row_of_an_entity_group_sorts_inside_its_range_and_no_other(
        a in prop_oneof![any::<i64>(), Just(0i64), Just(-1), Just(i64::MAX), Just(i64::MIN)],
        b in any::<i64>(),
        photos_a in photos_strategy(),
        photos_b in photos_strategy(),
        schema in prop_oneof![Just("photos.msdl"), Just("photos-inline.msdl")],
    ) {
        prop_assume!(a != b);
        let c = example(schema);
        let user_table = c.table("User").unwrap();
        let range_a = c.group_range(user_table, &[a.into()]).unwrap();
        let range_b = c.group_range(user_table, &[b.into()]).unwrap();
        let (group_a, global_a) = group_rows(&c, a, &photos_a);
        let (group_b, _) = group_rows(&c, b, &photos_b);
        for row in &group_a {
            prop_assert!(range_a.contains(row));
            prop_assert!(!range_b.contains(row));
            // And the key decodes back to user a's group.
            let primary_key = match c.decode_row_key(row).unwrap() {
                DecodedKey::Entity { primary_key, .. } | DecodedKey::IndexEntry { primary_key, .. } => primary_key,
            };
            prop_assert_eq!(&primary_key[0], &Value::from(a));
        }
        for row in &group_b {
            prop_assert!(!range_a.contains(row));
        }
        // Two tables never share a row: every entity row decodes to the table that
        // wrote it, and no two writes of distinct entities or entries share a key.
        let user_key = c.entity_row_key(user_table, &[a.into()]).unwrap();
        prop_assert_eq!(c.decode_row_key(&user_key).unwrap(), DecodedKey::Entity { table: user_table.id, primary_key: vec![a.into()] });
        let mut distinct_photos: Vec<i32> = photos_a.iter().map(|(pid, _, _)| *pid).collect();
        distinct_photos.sort_unstable();
        distinct_photos.dedup();
        if distinct_photos.len() == photos_a.len() {
            let mut unique = group_a.clone();
            unique.sort();
            unique.dedup();
            prop_assert_eq!(unique.len(), group_a.len(), "two writes shared a row");
        }
        for row in &global_a {
            prop_assert!(!range_a.contains(row) && !range_b.contains(row));
        }
    }

    #[test]
    fn scattered_groups_are_contiguous_too(x in any::<i32>(), y in any::<i32>(), feature in any::<u64>()) {
        let c = example("maps.msdl");
        let patch = c.table("Patch").unwrap();
        let range = c.group_range(patch, &[x.into(), y.into()]).unwrap();
        let feature_key = c.entity_row_key(c.table("Feature").unwrap(), &[x.into(), y.into(), feature.into()]).unwrap();
        prop_assert!(range.contains(&feature_key));
        let neighbour = c.group_range(patch, &[x.into(), y.wrapping_add(1).into()]).unwrap();
        prop_assert!(!neighbour.contains(&feature_key));
        prop_assert_eq!(
            c.decode_row_key(&feature_key).unwrap(),
            DecodedKey::Entity { table: c.table("Feature").unwrap().id, primary_key: vec![x.into(), y.into(), feature.into()] }
        );
    }
}

#[test]
fn rows_are_told_apart_from_the_schemas_key_space() {
    use megastore_schema::keyspace::{RowOwner, owner_of_row, untyped_group_prefix, untyped_row};
    let c = example("photos.msdl");
    let user = c.table("User").unwrap();
    let prefix = c.group_prefix(user, &[7i64.into()]).unwrap();
    let mut row = prefix.clone();
    row.extend_from_slice(b"\x01anything");
    let users_group = RowOwner::Typed {
        prefix: prefix.clone(),
        root: "User".into(),
    };
    assert_eq!(owner_of_row(Some(&c), &row), users_group);
    // A photo's row is in its user's group too.
    let photo = c
        .entity_row_key(c.table("Photo").unwrap(), &[7i64.into(), 1i32.into()])
        .unwrap();
    assert_eq!(owner_of_row(Some(&c), &photo), users_group);
    // A global index's entries.
    let tags = c.index("PhotosByTag").unwrap();
    assert_eq!(tags.kind, megastore_schema::IndexKind::Global);
    // The global index tag, then the index id; small object ids are one byte
    // (docs/architecture.md, "Data layout").
    let mut entry = vec![
        megastore_schema::keyspace::GLOBAL_INDEX_TAG,
        u8::try_from(tags.id.0).unwrap(),
    ];
    entry.extend_from_slice(b"whatever");
    assert_eq!(
        owner_of_row(Some(&c), &entry),
        RowOwner::GlobalIndex("PhotosByTag".into())
    );
    // Without the tag, the index id is no root table: nobody's.
    assert_eq!(owner_of_row(Some(&c), &entry[1..]), RowOwner::Unknown);
    // An entry as the mapping writes it decodes back, under the tag.
    let key = c
        .index_entry_key(tags, &["sunset".into()], &[7i64.into(), 1i32.into()])
        .unwrap();
    assert_eq!(key[0], megastore_schema::keyspace::GLOBAL_INDEX_TAG);
    assert!(matches!(
        c.decode_row_key(&key),
        Ok(megastore_schema::DecodedKey::IndexEntry { .. })
    ));
    // Untyped rows, even of a group named like User 7's prefix, are outside; so is a
    // truncated root key.
    let untyped = untyped_group_prefix(&prefix).unwrap();
    assert_eq!(
        owner_of_row(Some(&c), &untyped_row(&untyped, b"name")),
        RowOwner::Untyped(prefix.clone())
    );
    assert_eq!(owner_of_row(Some(&c), &row[..1]), RowOwner::Unknown);
    assert_eq!(owner_of_row(Some(&c), b""), RowOwner::Unknown);
}
