//! Support for megastore's end-to-end tests: they run the real `megastore` binary as a
//! child process (later: whole clusters on loopback) and check what a user would see.
//!
//! Finding the binary: set `MEGASTORE_BIN` to its path, or build it first — `cargo
//! build --workspace` (which `.ci/run` does) puts it in the same target profile
//! directory as this test executable, and [`megastore_bin`] looks there. A missing
//! binary fails the test with instructions; it never skips.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

/// Overrides where the `megastore` binary is.
pub const BIN_ENV: &str = "MEGASTORE_BIN";

/// The `megastore` binary to test.
pub fn megastore_bin() -> PathBuf {
    if let Some(path) = std::env::var_os(BIN_ENV) {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/e2e-<hash> → target/<profile>/megastore
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executables live in target/<profile>/deps");
    let bin = profile_dir.join("megastore");
    assert!(
        bin.is_file(),
        "{} not found: run `cargo build --workspace` first, or set {BIN_ENV}",
        bin.display()
    );
    bin
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

/// What a finished command printed and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

/// Runs `megastore args…` in `dir`, killing it (and failing) after `limit`.
pub fn run_megastore(args: &[&str], dir: &Path, limit: Duration) -> Finished {
    let mut child = Command::new(megastore_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start megastore");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let Some(status) = child.wait_timeout(limit).expect("wait for megastore") else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("megastore {args:?} did not finish within {limit:?}");
    };
    Finished {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}
