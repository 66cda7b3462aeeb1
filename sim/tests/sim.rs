//! The simulator as CI runs it: determinism, a fixed batch of clean seeds, and every
//! bug knob the checkers are trusted with caught within its stated number of seeds.

use megastore_sim::{BUG_NAMES, Bugs, bug, run_seed};

#[test]
fn one_seed_gives_one_trace_hash() {
    let a = run_seed(7, Bugs::default(), false);
    let b = run_seed(7, Bugs::default(), false);
    assert_eq!(a.trace_hash, b.trace_hash, "same seed, same run");
    assert_ne!(a.trace_hash, run_seed(8, Bugs::default(), false).trace_hash);
    assert!(
        a.stats.commits > 0 && a.stats.reads_local > 0 && a.stats.faults > 0,
        "{:?}",
        a.stats
    );
}

/// Runs `seeds` and fails on any violation, naming the seed to reproduce.
fn clean(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let report = run_seed(seed, Bugs::default(), false);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}\nreproduce: megastore-sim --reproduce {seed}",
            report.violations
        );
    }
}

#[test]
fn seeds_0_to_49_are_clean() {
    clean(0..50);
}

#[test]
fn seeds_50_to_99_are_clean() {
    clean(50..100);
}

#[test]
fn seeds_100_to_149_are_clean() {
    clean(100..150);
}

#[test]
fn seeds_150_to_199_are_clean() {
    clean(150..200);
}

/// Each knob, the checker expected to catch it, and within how many seeds (from seed 0)
/// it is caught. A checker counts as trusted only once it catches its knob.
const CAUGHT: &[(&str, &str, u64)] = &[
    ("skip-invalidate", "visible-after-invalidate", 5),
    ("grant-ballot0-twice", "ballot-zero-once", 5),
    ("validate-ignores-position", "vouched-is-current", 200),
    ("validate-after-remote-catchup", "vouched-is-current", 10),
    ("validate-without-lock", "vouched-is-current", 10),
    (
        "invalidate-only-seen-lacking",
        "visible-after-invalidate",
        5,
    ),
    ("read-local-unvouched", "linearizable-eg", 20),
    ("ack-before-invalidate", "visible-after-invalidate", 5),
    ("learn-from-single-accept", "single-value", 60),
    ("apply-out-of-order", "prefix-snapshots", 10),
];

fn first_catch(knob: &str, within: u64, checker: &str) -> Option<u64> {
    let bugs = bug(knob).expect("a known knob");
    (0..within).find(|seed| {
        run_seed(*seed, bugs, false)
            .violations
            .iter()
            .any(|v| v.invariant == checker)
    })
}

macro_rules! knob_tests {
    ($($test:ident => $index:expr),* $(,)?) => {$(
        #[test]
        fn $test() {
            let (knob, checker, within) = CAUGHT[$index];
            let caught = first_catch(knob, within, checker);
            assert!(caught.is_some(), "--bug {knob} was not caught by {checker} within {within} seeds");
        }
    )*};
}

knob_tests! {
    skip_invalidate_is_caught => 0,
    grant_ballot0_twice_is_caught => 1,
    validate_ignores_position_is_caught => 2,
    validate_after_remote_catchup_is_caught => 3,
    validate_without_lock_is_caught => 4,
    invalidate_only_seen_lacking_is_caught => 5,
    read_local_unvouched_is_caught => 6,
    ack_before_invalidate_is_caught => 7,
    learn_from_single_accept_is_caught => 8,
    apply_out_of_order_is_caught => 9,
}

#[test]
fn every_knob_has_a_name_the_command_line_accepts() {
    for name in BUG_NAMES {
        assert!(bug(name).is_some(), "{name}");
    }
    assert!(bug("no-such-bug").is_none());
    assert_eq!(BUG_NAMES.len(), 14);
}
