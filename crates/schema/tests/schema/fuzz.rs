//! Mutation fuzzing: take a valid example schema, break it a few words at a time, and
//! require `compile` to return (Ok or diagnostics with positions), never to panic.

use megastore_schema::compile;
use proptest::prelude::*;

use super::examples_dir;

const REPLACEMENTS: &[&str] = &[
    "User", "Photo", "Root", "user_id", "photo_id", "tag", "int64", "double", "float", "repeated",
    "optional", "ROOT", "KEY", "SCATTER", "IN", "TABLE", "INLINE", "LOCAL", "GLOBAL", "DESC", "(",
    ")", ",", ";", "{", "}", "",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Replace(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Replace(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn broken_example_schemas_give_diagnostics_not_panics(
        file in proptest::sample::select(vec!["photos.msdl", "photos-inline.msdl", "email.msdl", "blogs.msdl", "maps.msdl"]),
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let text = std::fs::read_to_string(examples_dir().join(file)).unwrap();
        // Words and punctuation as separate tokens, so edits can break structure.
        let spaced = ["(", ")", ",", ";", "{", "}"].iter().fold(text, |t, p| t.replace(p, &format!(" {p} ")));
        let mut words: Vec<String> = spaced.split_whitespace().map(str::to_string).collect();
        for e in edits {
            let n = words.len().max(1);
            match e {
                Edit::Delete(i) if !words.is_empty() => { words.remove(i % n); }
                Edit::Duplicate(i) if !words.is_empty() => { let w = words[i % n].clone(); words.insert(i % n, w); }
                Edit::Swap(a, b) if !words.is_empty() => words.swap(a % n, b % n),
                Edit::Replace(i, r) if !words.is_empty() => words[i % n] = REPLACEMENTS[r % REPLACEMENTS.len()].to_string(),
                _ => {}
            }
        }
        match compile(file, &words.join(" "), None) {
            Ok(catalog) => prop_assert_eq!(catalog.fingerprint, catalog.compute_fingerprint()),
            Err(e) => prop_assert!(e.diagnostics.iter().all(|d| d.pos.line >= 1 && d.pos.col >= 1 && !d.message.is_empty())),
        }
    }
}
