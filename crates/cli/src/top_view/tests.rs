//! The view's arithmetic, and what it draws, on ratatui's test backend.

use std::time::Duration;

use megastore_client::activity::{ReplicaActivity, ReplicaPoll};
use megastore_client::{GroupCount, HotGroupsNow};
use megastore_metrics::ClientTotals;
use megastore_paxos::ReplicaLag;
use megastore_types::{EgId, ReplicaKind};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::{Sample, TopView};

fn g(name: &str) -> EgId {
    megastore_client::group(name.as_bytes()).unwrap()
}

fn count(name: &str, count: u64) -> GroupCount {
    GroupCount {
        group: g(name),
        count,
        error: 0,
    }
}

fn poll(
    name: &str,
    site: &str,
    kind: ReplicaKind,
    activity: Option<ReplicaActivity>,
) -> ReplicaPoll {
    ReplicaPoll {
        name: name.into(),
        site: site.into(),
        kind,
        activity,
    }
}

fn activity(
    commits: u64,
    conflicts: u64,
    local: u64,
    majority: u64,
    hot: HotGroupsNow,
) -> ReplicaActivity {
    ReplicaActivity {
        totals: ClientTotals {
            commits,
            conflicts,
            reads_local: local,
            reads_majority: majority,
            ..ClientTotals::default()
        },
        lag: ReplicaLag {
            groups: 1,
            positions: 3,
        },
        hot,
    }
}

/// Two polls 2 s apart: site A commits 10/s (most in group "hot"), loses 2 positions
/// a second in "hot", reads 90 % locally; site B does nothing; the witness does not
/// answer.
fn view() -> TopView {
    let mut view = TopView::new("demo".into(), Duration::from_secs(2), None);
    let first = HotGroupsNow {
        commits: vec![count("hot", 5), count("warm", 5)],
        conflicts: vec![],
    };
    let second = HotGroupsNow {
        commits: vec![count("hot", 21), count("warm", 9)],
        conflicts: vec![count("hot", 4)],
    };
    let sample = |at: u64, a: ReplicaActivity, b: ReplicaActivity| Sample {
        at: Duration::from_secs(at),
        polls: vec![
            poll("a", "A", ReplicaKind::Full, Some(a)),
            poll("b", "B", ReplicaKind::Full, Some(b)),
            poll("c", "C", ReplicaKind::Witness, None),
        ],
    };
    let idle = || activity(5, 0, 0, 0, HotGroupsNow::default());
    view.push(sample(10, activity(10, 0, 0, 0, first), idle()));
    view.push(sample(12, activity(30, 4, 18, 2, second), idle()));
    view
}

#[test]
fn rates_are_per_site_and_per_second_over_the_last_interval() {
    let rates = view().site_rates();
    let a = &rates[0];
    assert_eq!((a.site.as_str(), a.commits, a.conflicts), ("A", 10.0, 2.0));
    assert_eq!((a.reads_local, a.reads_majority), (9.0, 1.0));
    assert_eq!(rates[1].commits, 0.0);
    assert_eq!(rates.len(), 3, "every site, answering or not");
}

#[test]
fn the_hottest_groups_come_first_by_commits_and_conflicts_per_second() {
    let hot = view().hot_rows();
    let found: Vec<_> = hot
        .iter()
        .map(|h| (h.group.clone(), h.commits, h.conflicts))
        .collect();
    assert_eq!(found, [(g("hot"), 8.0, 2.0), (g("warm"), 2.0, 0.0)]);
    assert_eq!(hot[0].commits_total, 21);
}

/// A restarted server's counters start again from zero: its new count is its rate.
#[test]
fn a_restarted_server_counts_from_zero() {
    let mut view = view();
    let idle = activity(5, 0, 0, 0, HotGroupsNow::default());
    view.push(Sample {
        at: Duration::from_secs(14),
        polls: vec![
            poll(
                "a",
                "A",
                ReplicaKind::Full,
                Some(activity(4, 0, 0, 0, HotGroupsNow::default())),
            ),
            poll("b", "B", ReplicaKind::Full, Some(idle)),
            poll("c", "C", ReplicaKind::Witness, None),
        ],
    });
    assert_eq!(view.site_rates()[0].commits, 2.0);
    assert_eq!(
        view.commit_history(),
        [10, 0],
        "the cluster's total went down: none"
    );
}

#[test]
fn the_frame_shows_rates_replicas_and_hot_groups() {
    let view = view();
    let mut terminal = Terminal::new(TestBackend::new(130, 40)).unwrap();
    terminal.draw(|frame| view.draw(frame)).unwrap();
    let text = super::frame_text(terminal.backend().buffer());
    for expected in [
        "megastore top · cluster demo",
        "commits/s, whole cluster (now 10)",
        "unreachable",
        "1 group / 3 positions",
        "90 %",
        "17 %",
        "\"hot\"",
        "\"warm\"",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    let hot_line = text.lines().find(|l| l.contains("\"hot\"")).unwrap();
    assert!(
        hot_line.contains("8.0") && hot_line.contains("2.0"),
        "{hot_line}"
    );
}
