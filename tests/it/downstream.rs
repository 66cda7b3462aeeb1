//! A program outside this repository that uses the client library: what it links.
//!
//! A crate outside the workspace does not see `.cargo/config.toml`, so a RocksDB in
//! its dependency tree is compiled from source (10–26 minutes). The client library
//! must not bring one: it talks to replicas, coordinators and lockd over gRPC only. And
//! the `megastore` binary, built alone, compiles none of the simulator's bug knobs.

use std::process::Command;

use megastore_e2e::repo_root;

/// Crates a client program must not link: the lock service's server side and the
/// storage engine behind it.
const SERVER_ONLY: &[&str] = &[
    "librocksdb-sys",
    "rocksdb",
    "megastore-rowstore-rocksdb",
    "megastore-lockd",
    "openraft",
];

#[test]
fn a_downstream_crate_of_the_client_library_links_no_rocksdb() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let client = repo_root().join("crates/client");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"downstream\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n\
             [dependencies]\nmegastore-client = {{ path = {:?} }}\n\n[workspace]\n",
            client.to_str().expect("a UTF-8 path")
        ),
    )
    .expect("write Cargo.toml");
    std::fs::create_dir(dir.path().join("src")).expect("src/");
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "pub use megastore_client::Client;\n",
    )
    .expect("write src/lib.rs");
    // The repository's lock file: the same versions, all in the local registry cache,
    // so the tree resolves offline.
    std::fs::copy(
        repo_root().join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .expect("copy Cargo.lock");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(dir.path())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {out:?}");
    let tree = String::from_utf8(out.stdout).expect("UTF-8");
    let packages: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    // The tree is the real one: the library and its transport are in it.
    for expected in ["megastore-client", "megastore-rpc", "tonic"] {
        assert!(
            packages.contains(&expected),
            "{expected} is missing from the tree:\n{tree}"
        );
    }
    let linked: Vec<&&str> = SERVER_ONLY
        .iter()
        .filter(|name| packages.contains(name))
        .collect();
    assert!(
        linked.is_empty(),
        "a client program would link {linked:?}:\n{tree}"
    );
}

/// The features `cargo tree` resolves for `package` built alone, as `cargo build -p`
/// (and `cargo install`) would, one `package feature "name"` line each.
fn resolved_features(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--package",
            package,
            "--edges",
            "features,normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(repo_root())
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn the_megastore_binary_compiles_without_the_simulators_bug_knobs() {
    // The simulator is built with them: the check sees the feature where it is on.
    let sim = resolved_features("megastore-sim");
    assert!(
        sim.contains("megastore-paxos feature \"sim-bugs\""),
        "the simulator's tree should enable sim-bugs:\n{sim}"
    );
    let production = resolved_features("megastore-cli");
    assert!(
        production.contains("megastore-paxos"),
        "the protocol core is missing from the binary's tree:\n{production}"
    );
    let with_knobs: Vec<&str> = production
        .lines()
        .filter(|line| line.contains("\"sim-bugs\""))
        .collect();
    assert!(
        with_knobs.is_empty(),
        "the megastore binary would compile bug knobs in: {with_knobs:?}"
    );
}
