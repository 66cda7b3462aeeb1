//! The Rust client's example programs (`crates/client/examples/`), run as a user runs
//! them against a local cluster: each must finish and print what it did.

use std::time::Duration;

use megastore_e2e::{LocalCluster, example_bin as example};
use wait_timeout::ChildExt;

fn run(name: &str, config: &str) -> String {
    let mut child = std::process::Command::new(example(name))
        .args([config, "A"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .unwrap()
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!("example {name} did not finish within 60 s")
        });
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        status.success(),
        "example {name}: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_client_examples_run_against_a_local_cluster() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(dir.path());
    let config = cluster.config_path.to_str().unwrap().to_string();

    let quickstart = run("quickstart", &config);
    assert!(
        quickstart.contains("visit 1 committed at log position"),
        "{quickstart}"
    );
    assert!(
        quickstart.contains("Snapshot read: visits Some(1)")
            || quickstart.contains("Current read: visits Some(1)"),
        "{quickstart}"
    );
    assert!(quickstart.contains("claimed job/1"), "{quickstart}");
    let again = run("quickstart", &config);
    assert!(again.contains("visit 2 committed"), "{again}");
    assert!(again.contains("job/1 was claimed already"), "{again}");

    crate::support::apply_schema(&config, "schema/photos.msdl", dir.path());
    let out = run("photos", &config);
    assert!(out.contains("beach: 6 photos (verified"), "{out}");
    assert!(out.contains("beach and sunset: 3 photos"), "{out}");
    assert_eq!(
        out.matches("https://photos.example/").count(),
        6 + 3,
        "{out}"
    );
}
