use megastore_schema::{Catalog, ColumnId, ObjectId, compile};

use super::example;

const V1: &str = "CREATE SCHEMA S;
CREATE TABLE A { required int64 id; required string x; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE B { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE GLOBAL INDEX AByX ON A(x);";

/// B dropped, C added before A, A gains a column before `x`, the index kept.
const V2: &str = "CREATE SCHEMA S;
CREATE TABLE C { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE A { required int64 id; optional string w; required string x; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE GLOBAL INDEX AByX ON A(x);";

#[test]
fn ids_are_assigned_in_declaration_order_from_one() {
    let v1 = compile("v1", V1, None).unwrap();
    assert_eq!(v1.table("A").unwrap().id, ObjectId(1));
    assert_eq!(v1.table("B").unwrap().id, ObjectId(2));
    assert_eq!(v1.index("AByX").unwrap().id, ObjectId(3));
    assert_eq!(v1.next_object_id, 4);
    let a = v1.table("A").unwrap();
    assert_eq!(
        (a.column("id").unwrap().id, a.column("x").unwrap().id),
        (ColumnId(1), ColumnId(2))
    );
}

#[test]
fn ids_survive_a_schema_change_and_are_never_reused() {
    let v1 = compile("v1", V1, None).unwrap();
    let v2 = compile("v2", V2, Some(&v1)).unwrap();
    assert_eq!(v2.table("A").unwrap().id, ObjectId(1));
    assert_eq!(v2.index("AByX").unwrap().id, ObjectId(3));
    // C is new: not 2 (B's, dropped), but the next never-used id.
    assert_eq!(v2.table("C").unwrap().id, ObjectId(4));
    let a = v2.table("A").unwrap();
    assert_eq!(a.column("x").unwrap().id, ColumnId(2));
    assert_eq!(a.column("w").unwrap().id, ColumnId(3));
    // Without the previous catalog the same text numbers afresh.
    let fresh = compile("v2", V2, None).unwrap();
    assert_eq!(fresh.table("A").unwrap().id, ObjectId(2));
}

#[test]
fn the_fingerprint_follows_the_content() {
    let a = compile("one name", V1, None).unwrap();
    let b = compile("another name", &format!("-- a comment\n{V1}"), None).unwrap();
    assert_eq!(
        a.fingerprint, b.fingerprint,
        "file name, comments and layout do not matter"
    );
    let c = compile(
        "v1",
        &V1.replace("required string x", "optional string x"),
        None,
    )
    .unwrap();
    assert_ne!(a.fingerprint, c.fingerprint);
    assert_eq!(a.fingerprint, a.compute_fingerprint());
}

#[test]
fn the_catalog_round_trips_through_json_and_refuses_tampering() {
    let c = example("photos.msdl");
    let json = c.to_json();
    assert_eq!(Catalog::from_json(&json).unwrap(), c);
    let tampered = json.replacen("\"thumbnail_url\"", "\"thumb\"", 1);
    assert!(
        Catalog::from_json(&tampered)
            .unwrap_err()
            .to_string()
            .contains("does not match")
    );
    assert!(
        Catalog::from_json("{")
            .unwrap_err()
            .to_string()
            .starts_with("not a catalog")
    );
}

/// A new index on a table that existed (and may hold entities) starts building; one on
/// a new table, or in a first version, is ready; an index keeps its state; the JSON of
/// a ready index is what it was before index states existed.
#[test]
fn a_new_index_on_an_existing_table_starts_building_until_backfilled() {
    use megastore_schema::IndexState;
    let v1 = compile("v1", V1, None).unwrap();
    assert_eq!(v1.index("AByX").unwrap().state, IndexState::Ready);
    assert!(!v1.to_json().contains("\"state\""), "{}", v1.to_json());
    let with = |extra: &str| format!("{V2}\n{extra}");
    let v2 = compile(
        "v2",
        &with("CREATE GLOBAL INDEX AByW ON A(w); CREATE GLOBAL INDEX CById ON C(id);"),
        Some(&v1),
    )
    .unwrap();
    assert_eq!(v2.index("AByX").unwrap().state, IndexState::Ready);
    assert_eq!(v2.index("AByW").unwrap().state, IndexState::Building);
    assert_eq!(
        v2.index("CById").unwrap().state,
        IndexState::Ready,
        "C is new"
    );
    assert!(v2.to_json().contains("\"state\": \"building\""));
    let again = Catalog::from_json(&v2.to_json()).unwrap();
    assert_eq!(again, v2);
    let v3 = compile(
        "v3",
        &with("CREATE GLOBAL INDEX AByW ON A(w); CREATE GLOBAL INDEX CById ON C(id);"),
        Some(&v2),
    )
    .unwrap();
    assert_eq!(
        v3.index("AByW").unwrap().state,
        IndexState::Building,
        "kept"
    );
    let query = megastore_schema::IndexQuery::new("AByW");
    let refused = v3.index_query_rows(&query).unwrap_err().to_string();
    assert!(refused.contains("being backfilled"), "{refused}");
}
