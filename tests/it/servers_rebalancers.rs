//! Background rebalancers, several at once (docs/operations.md, "Rebalancing"): the one
//! holding the operator lock in lockd plans and moves, the others stand by, and when
//! the leader is SIGKILLed mid-life one standing by takes the lead and finishes the
//! work, while a writer commits across the ranges being moved. A one-off rebalance is
//! refused while a background one leads.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::servers::{
    LIMIT, assert_forty_counters_hold, cli_of, forty_groups_in_four_ranges, with_servers,
    write_forty_counters,
};
use crate::support::start_cluster_edited;

/// A background rebalancer process and the lines it printed so far.
struct Rebalancer {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Rebalancer {
    /// Starts `megastore range rebalance --every EVERY --moves 1` against `config`: one
    /// move per round.
    fn start(config: &std::path::Path, dir: &std::path::Path, every: &str) -> Self {
        let mut child = Command::new(megastore_e2e::megastore_bin())
            .args(["range", "rebalance", "--by", "groups", "--moves", "1"])
            .args(["--every", every, "--config"])
            .arg(config)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("megastore range rebalance --every");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("its stdout");
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                kept.lock().unwrap().push(line);
            }
        });
        Rebalancer { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until a line satisfies `done`, or fails the test with what was printed.
    fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let started = Instant::now();
        while !done(&self.lines()) {
            assert!(
                started.elapsed() < LIMIT,
                "no {what}; printed:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Rebalancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_standby_rebalancer_takes_the_lead_when_the_leader_is_killed_and_only_the_leader_moves() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    // Four ranges of about ten groups each, all on a and c: four moves even them out.
    forty_groups_in_four_ranges(&mut cluster, dir.path(), &runtime, &config);
    let megastore = cli_of(&cluster, dir.path());

    let stop = AtomicBool::new(false);
    let (outcome, (first, second)) = std::thread::scope(|scope| {
        let writing =
            scope.spawn(|| write_forty_counters(&runtime, &config, &stop, 3_000, 2 * LIMIT));
        // The first moves once, then holds the lead with its next round ten minutes
        // away; the second would move every second if it led.
        let first = Rebalancer::start(&cluster.config_path, dir.path(), "600");
        first.wait_for("lead", |lines| {
            lines
                .iter()
                .any(|l| l.starts_with("leading: holds operator/rebalancer"))
        });
        let second = Rebalancer::start(&cluster.config_path, dir.path(), "1");
        let first_pid = format!("pid {} leads", first.child.id());
        second.wait_for("standing by", |lines| {
            lines
                .iter()
                .any(|l| l.starts_with("standing by: rebalancer@") && l.ends_with(&first_pid))
        });
        // The leader's first move, and no round at all from the one standing by.
        first.wait_for("first move", |lines| {
            lines.iter().any(|l| l.starts_with("  moved: epoch"))
        });
        // While one leads, a one-off rebalance is refused by name; a dry run is not.
        let one_off = megastore(&["range", "rebalance"]);
        assert!(
            !one_off.status.success()
                && one_off.stderr.contains("another rebalancer (rebalancer@")
                && one_off.stderr.contains("holds operator/rebalancer"),
            "{one_off:?}"
        );
        assert!(
            megastore(&["range", "rebalance", "--dry-run"])
                .status
                .success()
        );
        // `status` names the leader.
        let status = megastore(&["status"]).stdout;
        assert!(
            status.contains("rebalancer: rebalancer@") && status.contains(&first_pid),
            "{status}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&megastore(&["status", "-o", "json"]).stdout).expect("JSON");
        let owner = json["rebalancer"]["leader"]["owner"]
            .as_str()
            .unwrap_or_default();
        assert!(
            owner.ends_with(&format!("pid {}", first.child.id())),
            "{json}"
        );
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            second.lines().iter().all(|l| !l.starts_with("round")),
            "a rebalancer standing by planned:\n{}",
            second.lines().join("\n")
        );
        // The leader dies without giving the lock back: the one standing by leads once
        // the leader's session lapses, and moves what is left until balanced.
        let killed_at = Instant::now();
        let mut first = first;
        first.child.kill().expect("SIGKILL the leading rebalancer");
        let _ = first.child.wait();
        second.wait_for("takeover", |lines| {
            lines
                .iter()
                .any(|l| l.starts_with("leading: holds operator/rebalancer"))
        });
        let takeover = killed_at.elapsed();
        second.wait_for("balance", |lines| {
            lines.iter().any(|l| l.starts_with("balanced"))
        });
        stop.store(true, Ordering::SeqCst);
        // Within the leader's session lease (it may have renewed just before it died),
        // a poll and the time to reach lockd.
        let bound = config.timeouts.lock_lease() + Duration::from_secs(5);
        assert!(
            takeover < bound,
            "took the lead {takeover:?} after the SIGKILL"
        );
        (writing.join().expect("the writer"), (first, second))
    });
    // Between them, exactly the four moves, and the second's round only after it led.
    let moves = |r: &Rebalancer| {
        r.lines()
            .iter()
            .filter(|l| l.starts_with("  moved: epoch"))
            .count()
    };
    assert_eq!(
        moves(&first) + moves(&second),
        4,
        "first:\n{}\nsecond:\n{}",
        first.lines().join("\n"),
        second.lines().join("\n")
    );
    let second_lines = second.lines();
    let led = second_lines
        .iter()
        .position(|l| l.starts_with("leading:"))
        .expect("it led");
    assert!(
        second_lines[..led].iter().all(|l| !l.starts_with("round")),
        "{second_lines:?}"
    );
    let text = megastore(&["range", "list"]).stdout;
    assert!(
        text.contains("A: a (2), a2 (2)") && text.contains("C: c (2), c2 (2)"),
        "{text}"
    );
    // SIGINT: it gives the lock back and stops.
    let sent = Command::new("kill")
        .args(["-INT", &second.child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let mut second = second;
    let status = second.child.wait().expect("it ends");
    let started = Instant::now();
    while second.lines().last().map(String::as_str) != Some("stopped") {
        assert!(started.elapsed() < LIMIT, "{:?}", second.lines());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(status.success(), "{status:?}");
    let status = megastore(&["status"]).stdout;
    assert!(status.contains("rebalancer: none running"), "{status}");
    // Given back: a one-off rebalance takes the lock at once and finds nothing to do.
    let again = megastore(&["range", "rebalance"]);
    assert!(
        again.status.success() && again.stdout.contains("balanced"),
        "{again:?}"
    );

    // Every write is there exactly once (give or take those of unknown outcome).
    assert_forty_counters_hold(&runtime, &config, outcome);
}
