//! `megastore schema check`, as a user runs it.

use std::time::Duration;

use megastore_e2e::{repo_root, run_megastore};
use megastore_schema::Catalog;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn every_example_schema_checks_with_a_summary() {
    let files = [
        "schema/photos.msdl",
        "schema/photos-inline.msdl",
        "schema/email.msdl",
        "schema/blogs.msdl",
        "schema/maps.msdl",
    ];
    let mut args = vec!["schema", "check"];
    args.extend(files);
    let out = run_megastore(&args, &repo_root(), LIMIT);
    assert!(out.status.success(), "{out:?}");
    for file in files {
        assert!(
            out.stdout.contains(&format!("{file}: ok")),
            "{}",
            out.stdout
        );
    }
    for expected in [
        "schema PhotoApp",
        "entity group User (key user_id)",
        "table Photo  child in User",
        "PhotosByTag   global  Photo(tag), repeated, storing (thumbnail_url)",
        "entity group Patch (key cell_x, cell_y, SCATTER)",
        "3 entity group kind(s)",
        "PhotosByTime  inline  Photo(user_id, time DESC), storing (thumbnail_url)",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected:?} in\n{}",
            out.stdout
        );
    }
}

#[test]
fn errors_name_file_line_and_column_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let bad = "CREATE SCHEMA Bad;\nCREATE TABLE T {\n  required float id;\n} PRIMARY KEY(id), ENTITY GROUP ROOT, SCATTER;\nCREATE LOCAL INDEX I ON T(nope);\n";
    std::fs::write(dir.path().join("bad.msdl"), bad).unwrap();
    let good = repo_root().join("schema/photos.msdl");
    let out = run_megastore(
        &["schema", "check", "bad.msdl", good.to_str().unwrap()],
        dir.path(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("bad.msdl:4:15: error: column `id` of type float cannot be a key"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("bad.msdl:5:27: error: unknown column `nope` in LOCAL INDEX `I`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 of 2 schema file(s) have errors"),
        "{}",
        out.stderr
    );
    // The good file is still checked and summarised.
    assert!(out.stdout.contains("schema PhotoApp"), "{}", out.stdout);
}

#[test]
fn unreadable_and_non_utf8_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("latin1.msdl"),
        b"CREATE SCHEMA S;\n-- caf\xe9\n",
    )
    .unwrap();
    let out = run_megastore(
        &["schema", "check", "latin1.msdl", "missing.msdl"],
        dir.path(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("latin1.msdl:2:7: error: the file is not UTF-8 text"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("cannot read missing.msdl"),
        "{}",
        out.stderr
    );
}

#[test]
fn json_output_is_a_loadable_catalog() {
    let out = run_megastore(
        &["schema", "check", "--json", "schema/photos.msdl"],
        &repo_root(),
        LIMIT,
    );
    assert!(out.status.success(), "{out:?}");
    let catalog = Catalog::from_json(&out.stdout).expect("a catalog with a matching fingerprint");
    assert_eq!(catalog.name, "PhotoApp");
}

#[test]
fn usage_errors_exit_2_with_help() {
    let out = run_megastore(&["schema", "check"], &repo_root(), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("FILE"), "{}", out.stderr);
    let help = run_megastore(&["--help"], &repo_root(), LIMIT);
    assert!(
        help.status.success() && help.stdout.contains("schema"),
        "{help:?}"
    );
}
