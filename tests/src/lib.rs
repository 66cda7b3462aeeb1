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

/// A `megastore` server process (a lockd node, a replica, …) that is killed when
/// dropped, so a failing test leaves nothing running. Its stderr goes to a log file,
/// printed when the test fails.
pub struct Process {
    child: std::process::Child,
    name: String,
    log: PathBuf,
}

impl Process {
    /// Starts `megastore args…` in `dir`, logging to `dir/<name>.log`.
    pub fn start(name: &str, args: &[&str], dir: &Path) -> Self {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("create the process log");
        let child = Command::new(megastore_bin())
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file)
            .spawn()
            .expect("start megastore");
        Self {
            child,
            name: name.to_string(),
            log,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `limit` for a clean exit; whether it exited cleanly.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        match self.child.wait_timeout(limit) {
            Ok(Some(status)) => status.success(),
            _ => {
                self.kill();
                false
            }
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    // A failing test shows what its servers said.
    #[allow(clippy::print_stderr)]
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.name, self.log());
        }
    }
}

/// Distinct free loopback ports (all listeners are held until every port is chosen).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect()
}
