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

mod black_hole;
pub use black_hole::BlackHoleProxy;

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
    run_megastore_with_input(args, "", dir, limit)
}

/// Runs `megastore args…` in `dir` with `input` on its stdin, killing it (and failing)
/// after `limit`.
pub fn run_megastore_with_input(
    args: &[&str],
    input: &str,
    dir: &Path,
    limit: Duration,
) -> Finished {
    let mut child = Command::new(megastore_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start megastore");
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_string();
    // A writer of its own: a child that does not read cannot block the test.
    std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(input.as_bytes());
    });
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
        Self::start_program(name, &megastore_bin(), args, dir)
    }

    /// Starts `program args…` in `dir` (a peer's server, say), logging to
    /// `dir/<name>.log`; its temporary files go in `dir` too (`TMPDIR`), so a process
    /// killed before it could clean up leaves nothing behind the test's directory.
    pub fn start_program(name: &str, program: &Path, args: &[&str], dir: &Path) -> Self {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("create the process log");
        let child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
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

    /// Sends a signal by name (`STOP`, `CONT`, …).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "could not send SIG{name} to {}", self.name);
        if name == "STOP" {
            self.wait_stopped();
        }
    }

    /// Waits (at most 5 s) until every thread of the process has stopped: `kill`
    /// returns once the signal is sent, and a thread running on another core serves on
    /// until it is interrupted — on a loaded machine, long enough to answer requests
    /// sent after the signal.
    fn wait_stopped(&self) {
        let tasks = format!("/proc/{}/task", self.child.id());
        let stopped = |stat: &str| {
            // The state follows the parenthesised command name.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        };
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            let all_stopped = std::fs::read_dir(&tasks).is_ok_and(|threads| {
                threads.flatten().all(|thread| {
                    std::fs::read_to_string(thread.path().join("stat"))
                        .map_or(true, |stat| stopped(&stat))
                })
            });
            if all_stopped {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
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

    /// The log's finished lines: a running process may be halfway through
    /// writing its last one, which a parser must not see.
    pub fn finished_lines(&self) -> Vec<String> {
        let log = self.log();
        let finished = log.rfind('\n').map_or("", |end| &log[..end]);
        finished.lines().map(str::to_string).collect()
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

/// Where [`free_ports`] looks: below Linux's ephemeral range (32768–60999 by
/// default), because the kernel hands ephemeral ports to every outgoing connection and
/// to every `bind(…:0)`. A test that restarts a process on its port after a kill would
/// otherwise race any client connection for it (a restarted replica once failed to
/// bind its metrics port, held by some connection's source port).
const TEST_PORTS: std::ops::Range<u16> = 16_384..32_768;

/// Ports this process handed out already: free when chosen, but perhaps not yet bound
/// by the process they were chosen for (a cluster's config is written before its
/// processes start), so a later call must not choose them again.
static PORTS_GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Distinct free loopback ports outside the ephemeral range (all listeners are held
/// until every port is chosen), none handed out before by this process. The start is
/// random, so concurrent test processes rarely probe the same ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    let mut given = PORTS_GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let start = hasher.finish() % span;
    let mut listeners = Vec::with_capacity(n);
    for offset in 0..span {
        if listeners.len() == n {
            break;
        }
        let port = TEST_PORTS.start + u16::try_from((start + offset) % span).expect("in range");
        if given.contains(&port) {
            continue;
        }
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    assert_eq!(
        listeners.len(),
        n,
        "{n} free loopback ports in {TEST_PORTS:?}"
    );
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect();
    given.extend(&ports);
    ports
}

/// Starts `megastore args…` like [`Process::start`], and starts it again while it
/// exits because one of its ports is in use (up to 10 s). A port freed by a killed
/// process can be held for a moment by someone else: another test process probing
/// for free ports, or a connection's source port where the kernel's ephemeral range
/// reaches below 32768. Returns once the process logs that it is serving, exits for
/// another reason, or has run 2 s (a replica waiting for lockd, say).
pub fn start_listening(name: &str, args: &[&str], dir: &Path) -> Process {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let mut started = start_all_listening(&[(name.to_string(), args)], dir);
    started.pop().expect("one process started")
}

/// [`start_listening`] for several processes at once (`(name, args)` each), waiting
/// for them together; in the order given.
pub fn start_all_listening(processes: &[(String, Vec<String>)], dir: &Path) -> Vec<Process> {
    /// One process on its way to serving.
    enum Starting {
        /// Started at `since`; its log had `logged_before` bytes from earlier runs.
        Running {
            process: Process,
            logged_before: usize,
            since: std::time::Instant,
        },
        /// Exited for a port in use: to be started again at this time.
        Again(std::time::Instant),
        /// Serving, exited for another reason, or still starting after 2 s.
        Settled(Process),
    }
    let spawn = |name: &str, args: &[String]| {
        let logged_before = std::fs::metadata(dir.join(format!("{name}.log")))
            .map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Starting::Running {
            process: Process::start(name, &args, dir),
            logged_before,
            since: std::time::Instant::now(),
        }
    };
    let give_up_retrying = std::time::Instant::now() + Duration::from_secs(10);
    let mut states: Vec<Starting> = processes
        .iter()
        .map(|(name, args)| spawn(name, args))
        .collect();
    while states.iter().any(|s| !matches!(s, Starting::Settled(_))) {
        std::thread::sleep(Duration::from_millis(20));
        for (state, (name, args)) in states.iter_mut().zip(processes) {
            let next = match std::mem::replace(state, Starting::Again(std::time::Instant::now())) {
                Starting::Running {
                    mut process,
                    logged_before,
                    since,
                } => {
                    let logged = process.log().get(logged_before..).unwrap_or("").to_string();
                    let running = process.running();
                    if logged.contains("serving")
                        || (running && since.elapsed() >= Duration::from_secs(2))
                    {
                        Starting::Settled(process)
                    } else if running {
                        Starting::Running {
                            process,
                            logged_before,
                            since,
                        }
                    } else if logged.contains("Address already in use")
                        && std::time::Instant::now() < give_up_retrying
                    {
                        report_port_holders(name, &logged);
                        Starting::Again(std::time::Instant::now() + Duration::from_millis(250))
                    } else {
                        Starting::Settled(process)
                    }
                }
                Starting::Again(at) if std::time::Instant::now() >= at => spawn(name, args),
                waiting => waiting,
            };
            *state = next;
        }
    }
    states
        .into_iter()
        .map(|state| match state {
            Starting::Settled(process) => process,
            _ => unreachable!("every process settled"),
        })
        .collect()
}

/// Says on stderr who holds the port a process could not listen on (`ss`), so a
/// collision that outlasts the retries can be understood from the test's output.
#[allow(clippy::print_stderr)]
fn report_port_holders(name: &str, logged: &str) {
    // "cannot listen on 127.0.0.1:28573: Address already in use" (or "…:28573 for
    // metrics: …") → "28573".
    let port = logged
        .split("cannot listen on ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|address| address.trim_end_matches(':').rsplit(':').next())
        .unwrap_or_default();
    let sockets = Command::new("ss")
        .args(["-tanp"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let holders: Vec<&str> = sockets
        .lines()
        // Local address is the fourth column: the sockets bound to the port itself.
        .filter(|line| {
            let local = line.split_whitespace().nth(3).unwrap_or("");
            !port.is_empty() && local.ends_with(&format!(":{port}"))
        })
        .collect();
    eprintln!("{name}: port {port} is in use, starting again; its sockets: {holders:#?}");
}

/// The default topology (docs/architecture.md, "Default topology") on free loopback ports with short timeouts, as
/// a config file in `dir`: full replicas `a` (site A) and `b` (site B) with
/// coordinators, witness `c` (C), read-only `d` (D), lockd nodes `lock-0..2` at A, B, C;
/// every process serves metrics too.
pub fn write_cluster_config(dir: &Path) -> PathBuf {
    let ports = free_ports(18);
    let mut text = String::from(
        "[cluster]\nname = \"e2e\"\nsites = [\"A\", \"B\", \"C\", \"D\"]\n\n\
         [timeouts]\nlock_lease_ms = 2000\nelection_timeout_ms = 300\nheartbeat_ms = 75\n\
         rpc_ms = 500\nsweep_ms = 300\n",
    );
    let replicas = [
        ("a", "A", "full"),
        ("b", "B", "full"),
        ("c", "C", "witness"),
        ("d", "D", "read-only"),
    ];
    let mut port = ports.into_iter();
    for (i, (name, site, kind)) in replicas.iter().enumerate() {
        text += &format!(
            "\n[[replicas]]\nname = \"{name}\"\nid = {}\nsite = \"{site}\"\nkind = \"{kind}\"\n\
             address = \"127.0.0.1:{}\"\ndata_dir = \"data/{name}\"\n\
             metrics_address = \"127.0.0.1:{}\"\n",
            i + 1,
            port.next().expect("enough ports"),
            port.next().expect("enough ports")
        );
        if *kind == "full" {
            text += &format!(
                "coordinator_address = \"127.0.0.1:{}\"\n\
                 coordinator_metrics_address = \"127.0.0.1:{}\"\n",
                port.next().expect("enough ports"),
                port.next().expect("enough ports")
            );
        }
    }
    for (i, site) in ["A", "B", "C"].iter().enumerate() {
        text += &format!(
            "\n[[lockd]]\nname = \"lock-{i}\"\nid = {}\nsite = \"{site}\"\n\
             address = \"127.0.0.1:{}\"\ndata_dir = \"data/lock-{i}\"\n\
             metrics_address = \"127.0.0.1:{}\"\n",
            i + 1,
            port.next().expect("enough ports"),
            port.next().expect("enough ports")
        );
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).expect("write the cluster config");
    path
}

/// Every process of a [`write_cluster_config`] cluster, started as separate
/// `megastore` processes; all killed when dropped.
pub struct LocalCluster {
    /// The config file.
    pub config_path: PathBuf,
    dir: PathBuf,
    /// The processes by name: `lock-0..2`, `replica-a..d`, `coordinator-a`, `-b`.
    pub processes: std::collections::BTreeMap<String, Process>,
}

impl LocalCluster {
    /// Starts lockd, then the replicas and coordinators.
    pub fn start(dir: &Path) -> Self {
        Self::start_configured(dir, |_| {})
    }

    /// Like [`LocalCluster::start`], with `configure` run on the config file first
    /// (to add a `[tls]` section, say).
    pub fn start_configured(dir: &Path, configure: impl FnOnce(&Path)) -> Self {
        let config_path = write_cluster_config(dir);
        configure(&config_path);
        let mut cluster = Self {
            config_path,
            dir: dir.to_path_buf(),
            processes: std::collections::BTreeMap::new(),
        };
        let names = [
            "lock-0",
            "lock-1",
            "lock-2",
            "replica-a",
            "replica-b",
            "replica-c",
        ];
        let names = names
            .into_iter()
            .chain(["replica-d", "coordinator-a", "coordinator-b"]);
        cluster.start_processes(&names.collect::<Vec<_>>());
        cluster
    }

    /// Starts (or restarts) one process by name.
    pub fn start_process(&mut self, process: &str) {
        let config = self.config_path.clone();
        self.start_process_with(process, &config);
    }

    /// Starts (or restarts) one process by name with another view of the cluster (the
    /// same processes, say, with an address that leads nowhere).
    pub fn start_process_with(&mut self, process: &str, config: &Path) {
        self.start_processes_with(&[process], config);
    }

    /// Starts (or restarts) several processes by name at once, and waits for them
    /// together ([`start_all_listening`]).
    pub fn start_processes(&mut self, processes: &[&str]) {
        let config = self.config_path.clone();
        self.start_processes_with(processes, &config);
    }

    fn start_processes_with(&mut self, processes: &[&str], config: &Path) {
        let config = config.to_str().expect("a UTF-8 path").to_string();
        let commands: Vec<(String, Vec<String>)> = processes
            .iter()
            .map(|&process| {
                let (command, id) = match process.split_once('-') {
                    Some(("lock", _)) => ("lockd", process),
                    Some(("replica", name)) => ("replica", name),
                    Some(("coordinator", name)) => ("coordinator", name),
                    _ => panic!("no process kind in {process:?}"),
                };
                let args = [command, "--config", &config, "--id", id];
                (process.to_string(), args.map(str::to_string).to_vec())
            })
            .collect();
        for (process, started) in processes
            .iter()
            .zip(start_all_listening(&commands, &self.dir))
        {
            self.processes.insert(process.to_string(), started);
        }
    }

    /// Waits until the process called `name` has logged `text` (a replica logs "replica
    /// serving" once it serves), failing after `limit`.
    pub fn wait_for_log(&mut self, name: &str, text: &str, limit: Duration) {
        let started = std::time::Instant::now();
        let process = self.process(name);
        while !process.log().contains(text) {
            assert!(process.running(), "{name} stopped:\n{}", process.log());
            assert!(
                started.elapsed() < limit,
                "{name} did not log {text:?} within {limit:?}:\n{}",
                process.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process called `name`.
    pub fn process(&mut self, name: &str) -> &mut Process {
        self.processes
            .get_mut(name)
            .unwrap_or_else(|| panic!("no process {name}"))
    }
}

/// Held by every test that starts servers, so they run one at a time also under plain
/// `cargo test` (nextest's `cluster` test group does the same for `.ci/run`).
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// An example program's binary (`crates/*/examples/`), built with the workspace
/// (`cargo build --workspace --all-targets`).
pub fn example_bin(name: &str) -> PathBuf {
    let bin = megastore_bin()
        .parent()
        .expect("the binary lives in target/<profile>")
        .join("examples")
        .join(name);
    assert!(
        bin.is_file(),
        "{} not found: build it with `cargo build --workspace --examples`",
        bin.display()
    );
    bin
}

/// The Python interpreter with grpcio for the public-API test: `MEGASTORE_PYTHON`, else
/// the virtualenv `.ci/setup.sh` makes (`~/.cache/megastore/venv`), else `python3`. A
/// missing module fails the test with instructions; it never skips.
pub fn python_with_grpc() -> PathBuf {
    let setup_venv = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/megastore/venv/bin/python"))
        .filter(|p| p.is_file());
    let python = std::env::var_os("MEGASTORE_PYTHON")
        .map(PathBuf::from)
        .or(setup_venv)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let ok = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import grpc and grpc_tools: run `source .ci/setup.sh` (it makes a virtualenv and sets MEGASTORE_PYTHON)",
        python.display()
    );
    python
}

/// The Prometheus text a process serves at `GET /metrics` on `address`.
pub fn scrape_metrics(address: &str) -> String {
    use std::io::Write;
    let mut stream =
        std::net::TcpStream::connect(address).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The value of one sample (`name{labels}` exactly as printed) in Prometheus text.
pub fn metric_value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}
