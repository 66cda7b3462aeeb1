use megastore_schema::{IndexKind, Label, ScalarType, TableKind, summary};

use super::{example, examples_dir};

#[test]
fn every_example_schema_compiles() {
    let mut names: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".msdl"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "blogs.msdl",
            "email.msdl",
            "maps.msdl",
            "photos-inline.msdl",
            "photos.msdl"
        ]
    );
    for name in names {
        example(&name);
    }
}

#[test]
fn the_papers_photo_schema_means_what_the_paper_says() {
    let c = example("photos.msdl");
    assert_eq!(c.name, "PhotoApp");
    let user = c.table("User").unwrap();
    let photo = c.table("Photo").unwrap();
    assert_eq!(user.kind, TableKind::Root { scatter: false });
    assert_eq!(
        photo.kind,
        TableKind::Child {
            root: user.id,
            parent: user.id
        }
    );
    assert_eq!(c.group_key_len(photo), 1);
    assert_eq!(photo.column("tag").unwrap().label, Label::Repeated);
    assert_eq!(photo.column("photo_id").unwrap().ty, ScalarType::Int32);
    let by_time = c.index("PhotosByTime").unwrap();
    assert_eq!(by_time.kind, IndexKind::Local);
    let by_tag = c.index("PhotosByTag").unwrap();
    assert_eq!(by_tag.kind, IndexKind::Global);
    assert_eq!(
        by_tag.storing,
        vec![photo.column("thumbnail_url").unwrap().id]
    );
    let text = summary(&c);
    assert!(
        text.contains("PhotosByTag   global  Photo(tag), repeated, storing (thumbnail_url)"),
        "{text}"
    );
}

#[test]
fn blogs_has_three_kinds_of_entity_groups_and_maps_is_scattered() {
    let blogs = example("blogs.msdl");
    let roots: Vec<&str> = blogs
        .tables
        .iter()
        .filter(|t| matches!(t.kind, TableKind::Root { .. }))
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(roots, ["Profile", "Blog", "BlogName"]);
    let comment = blogs.table("Comment").unwrap();
    assert!(
        matches!(comment.kind, TableKind::Child { parent, .. } if parent == blogs.table("Post").unwrap().id)
    );
    let maps = example("maps.msdl");
    assert!(maps.table("Patch").unwrap().is_scattered());
    assert!(!maps.table("Feature").unwrap().is_scattered());
}

#[test]
fn the_inline_photo_variant_stores_entries_in_the_user() {
    let c = example("photos-inline.msdl");
    let index = c.index("PhotosByTime").unwrap();
    assert_eq!(index.kind, IndexKind::Inline);
    assert_eq!(
        index.columns[1].direction,
        megastore_schema::Direction::Desc
    );
}
