//! Mechanical style rules (conventions 3 and 15): the protocol cores take time,
//! randomness and IO as inputs, never from their surroundings.

use megastore_e2e::repo_root;

/// Crates whose code must stay pure.
const CORE_CRATES: &[&str] = &[
    "crates/types",
    "crates/lock",
    "crates/coordinator",
    "crates/paxos",
];

/// Banned text, and what to use instead.
const BANNED: &[(&str, &str)] = &[
    ("Instant::now", "take `now: Time` as an input"),
    ("SystemTime::now", "take `now: Time` as an input"),
    ("thread_rng", "use the seeded generator the core owns"),
    ("rand::random", "use the seeded generator the core owns"),
    (
        "tokio::",
        "drivers run the async IO; cores stay synchronous",
    ),
    ("tonic::", "wire types live in `rpc`, converted at the edge"),
    (
        "rocksdb::",
        "storage is the RowStore trait, driven by outputs",
    ),
    ("std::fs::", "cores do no IO"),
    ("std::net::", "cores do no IO"),
    (
        "HashMap<",
        "iteration order must be deterministic: use BTreeMap",
    ),
    (
        "HashSet<",
        "iteration order must be deterministic: use BTreeSet",
    ),
];

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn protocol_cores_take_time_randomness_and_io_as_inputs() {
    let mut problems = Vec::new();
    for krate in CORE_CRATES {
        let mut files = Vec::new();
        rust_files(&repo_root().join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "{krate} has sources");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (line_no, line) in text.lines().enumerate() {
                for (banned, instead) in BANNED {
                    if line.contains(banned) {
                        problems.push(format!(
                            "{}:{}: `{banned}`: {instead}",
                            file.display(),
                            line_no + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_debugging_leftovers_anywhere() {
    let mut files = Vec::new();
    for dir in ["crates", "sim/src", "tests/src", "tests/it"] {
        rust_files(&repo_root().join(dir), &mut files);
    }
    let leftovers: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains("dbg!(") || l.contains("FIXME"))
                .map(|(n, _)| format!("{}:{}", f.display(), n + 1))
                .collect::<Vec<_>>()
        })
        .filter(|place| !place.contains("tidy.rs"))
        .collect();
    assert!(leftovers.is_empty(), "dbg!/FIXME left in: {leftovers:?}");
}
