//! The simulator as CI runs it: determinism, a fixed batch of clean seeds, and every
//! bug knob the checkers are trusted with caught within its stated number of seeds.

use megastore_sim::{BUG_NAMES, Bugs, SimConfig, bug, measure, run_seed};

#[test]
fn one_seed_gives_one_trace_hash() {
    let a = run_seed(7, Bugs::default(), false);
    let b = run_seed(7, Bugs::default(), false);
    assert_eq!(a.trace_hash, b.trace_hash, "same seed, same run");
    assert_ne!(a.trace_hash, run_seed(8, Bugs::default(), false).trace_hash);
}

#[test]
fn runs_exercise_commits_local_and_majority_reads_and_faults() {
    let reports: Vec<_> = (7..11)
        .map(|seed| run_seed(seed, Bugs::default(), false))
        .collect();
    let sum =
        |f: fn(&megastore_sim::Stats) -> u64| reports.iter().map(|r| f(&r.stats)).sum::<u64>();
    assert!(sum(|s| s.commits) > 0, "commits");
    assert!(sum(|s| s.reads_local) > 0, "local reads");
    assert!(sum(|s| s.reads_majority) > 0, "majority reads");
    assert!(sum(|s| s.faults) > 0, "faults");
    assert!(sum(|s| s.collections) > 0, "garbage collections");
    assert!(sum(|s| s.reads_at_position) > 0, "reads at a position");
    // The operator split ranges, and every server process up at the end follows the
    // newest placement.
    assert!(sum(|s| s.splits) > 0, "ranges split");
    assert!(sum(|s| s.spares) > 0, "spare servers ran");
    assert!(sum(|s| s.moves_finished) > 0, "slots moved");
    assert!(
        sum(|s| s.copy_pages) > 2 * sum(|s| s.moves_finished),
        "copies take several steps"
    );
    assert_eq!(
        sum(|s| s.placements_behind),
        0,
        "server processes behind the placement"
    );
    // Clients, like the client library, read the placement only when refused: some
    // end the run still routing by an older one.
    assert!(
        sum(|s| s.clients_behind) > 0,
        "clients behind the placement"
    );
    // Clients that scan scanned the whole global index after the run
    // (global-scan-complete).
    assert!(sum(|s| s.final_scans) > 0, "final global index scans");
}

/// Where relays run a workload of their own (as replicas' gateways do), a relay that
/// loses a group's races relays its own commits to the position leader's relay: the
/// checkers see those commits' outcomes (docs/protocol.md, "Relayed commits", step 7).
#[test]
fn gateways_follow_the_position_leader() {
    let seeds: Vec<u64> = (0..200)
        .filter(|seed| SimConfig::gateway_workload(*seed))
        .take(3)
        .collect();
    assert_eq!(seeds.len(), 3, "seeds with gateways");
    let relayed_by_relays: u64 = seeds
        .into_iter()
        .map(|seed| clean_run(seed).stats.relayed_by_relays)
        .sum();
    assert!(
        relayed_by_relays > 0,
        "no relay followed the position leader"
    );
}

/// Runs `seed` and fails on any violation, naming the seed to reproduce.
fn clean_run(seed: u64) -> megastore_sim::SeedReport {
    let report = run_seed(seed, Bugs::default(), false);
    assert!(
        report.violations.is_empty(),
        "seed {seed}: {:#?}\nreproduce: megastore-sim --reproduce {seed}",
        report.violations
    );
    report
}

/// What clean runs had, counted over their seeds.
#[derive(Default)]
struct Seen {
    wipes: u64,
    installs: u64,
    removals: u64,
    full_removals: u64,
    catch_ups: u64,
}

/// Runs `seeds` and fails on any violation, naming the seed to reproduce. Returns what
/// the runs had of wipes, snapshot installs, removals and voter changes caught up.
fn clean(seeds: std::ops::Range<u64>) -> Seen {
    let mut seen = Seen::default();
    for seed in seeds {
        let report = clean_run(seed);
        seen.wipes += report.stats.wipes;
        seen.installs += report.stats.installs;
        seen.removals += report.stats.removals;
        seen.full_removals += report.stats.full_removals;
        seen.catch_ups += report.stats.catch_ups;
    }
    seen
}

#[test]
fn seeds_0_to_49_are_clean_and_wiped_replicas_rejoin() {
    let seen = clean(0..50);
    assert!(seen.wipes > 0, "no replica was wiped");
    assert!(seen.installs > 0, "no wiped replica installed a snapshot");
    assert!(seen.removals > 0, "no replica was removed from ranges");
    assert!(
        seen.full_removals > 0,
        "no full replica was removed (its slot leaving, its coordinator fenced)"
    );
    assert!(
        seen.catch_ups > 0,
        "no voter change was caught up (so no range took a second)"
    );
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

/// Seeds that long runs found broken once, kept clean (5272 and 6079: a late answer
/// about a coordinator's previous lock session sent it back to opening a session while
/// it held its lock — fixed in `crates/coordinator`; 21355: idle groups after every
/// replica restarted, the simulator's registry load; 3106: a position only a read-only
/// replica still held visible — the learn step asks read-only replicas; 472 and 5284:
/// a cross-group transaction's own client, slow past the decision retention, recorded
/// abort afresh after others had aborted, finished and collected it — the client
/// rechecks its prepared records now; 6053: a transaction left prepared because the
/// modelled sweep stopped with the workload — it goes on until the last 5 s now;
/// 3087 and 3818: with every absent decision rechecked, an abort recorded a round trip
/// late in a hot group lost its positions until a reader gave up, and an owner with no
/// record to recheck trusted an absence — the collection watermark answers both; 7054:
/// a transaction that began preparing long before the end but was recorded aborted only
/// after the workload stopped (its decision lost positions in a hot coordinator group
/// for seconds), so *decisions-collected* judges by when a transaction finished, not
/// when it began; 748 and 6120: a decision that landed after the workload, when every
/// sweeping client had gone idle, was never collected — work coming in then wakes them
/// now, as it wakes a real server's group work; 4035: a move's target down through the
/// move's abort kept its partial copy, never reading the placement again — a restarted
/// server polls the placement now; 812: a split inside a group's keys separated its
/// mirrors from its root, and a move lost global index entries — the operator splits
/// between groups now; 6051 and 5363: once composite operations' commits rode the
/// lanes, a relay lent a settle's read (whose pending set names no locks) to a blind
/// write, which wrote a row a prepared transaction held — a two-phase step's read is
/// lent to nobody now. Later
/// changes reshuffle each seed's trace, so these guard the seeds, not the
/// interleavings).
#[test]
fn seeds_long_runs_found_stay_clean() {
    for seed in [
        5272, 6079, 21355, 3106, 472, 5284, 6053, 3087, 3818, 7054, 748, 6120, 4035, 812, 6051,
        5363,
    ] {
        clean(seed..seed + 1);
    }
}

/// Each knob, the checkers built to catch it, and within how many seeds (from seed 0)
/// one of them does. A checker counts as trusted only once it catches its knob.
/// (`read-position-before-vouch` and `validate-ignores-epoch` need interleavings random
/// seeds almost never produce: scripted ones in the crate's unit tests catch them.)
const CAUGHT: &[(&str, &[&str], u64)] = &[
    (
        "skip-invalidate",
        &["visible-after-invalidate", "vouched-is-current"],
        5,
    ),
    ("grant-ballot0-twice", &["ballot-zero-once"], 5),
    (
        "validate-ignores-position",
        &["vouched-is-current", "visible-after-invalidate"],
        250,
    ),
    (
        "validate-after-remote-catchup",
        &["vouched-is-current", "visible-after-invalidate"],
        60,
    ),
    (
        "validate-without-lock",
        &["vouched-is-current", "visible-after-invalidate"],
        40,
    ),
    (
        "invalidate-only-seen-lacking",
        &["visible-after-invalidate", "vouched-is-current"],
        5,
    ),
    ("read-local-unvouched", &["linearizable-eg"], 30),
    ("ack-before-invalidate", &["visible-after-invalidate"], 10),
    ("learn-from-single-accept", &["single-value"], 40),
    ("leader-from-unchosen-entry", &["ballot-zero-once"], 240),
    (
        "forget-promise-on-restart",
        &["single-value", "acceptor-monotone"],
        40,
    ),
    (
        "apply-out-of-order",
        &["prefix-snapshots", "linearizable-eg"],
        15,
    ),
    // First caught at seed 194 (then 201, 258) once a replica's sweep probed every
    // registered group at its start.
    (
        "rejoin-as-voter",
        &["single-value", "ballot-zero-once", "linearizable-eg"],
        300,
    ),
    ("resolve-without-settling", &["durable-ack"], 240),
    (
        "release-while-vouching",
        &["visible-after-invalidate", "vouched-is-current"],
        240,
    ),
    ("resolve-any-remembered-txn", &["durable-ack"], 170),
    (
        "collect-without-floor",
        &["linearizable-eg", "prefix-snapshots"],
        20,
    ),
    ("read-at-position-reads-applied", &["prefix-snapshots"], 5),
    (
        "keep-state-across-epochs",
        &["vouched-is-current", "visible-after-invalidate"],
        80,
    ),
    ("accept-persists-no-promise", &["acceptor-monotone"], 10),
    (
        "reply-before-sync",
        &["acceptor-monotone", "single-value", "durable-ack"],
        10,
    ),
    ("global-copies-skip-deletes", &["global-index"], 15),
    ("install-without-global", &["global-index"], 25),
    ("verify-trusts-the-scan", &["verified-scan"], 5),
    (
        "deliver-without-dedup",
        &["queue-exactly-once-in-order"],
        10,
    ),
    ("consume-outside-txn", &["queue-exactly-once-in-order"], 40),
    ("batch-in-row-order", &["queue-exactly-once-in-order"], 45),
    ("decide-before-all-prepared", &["multi-group-atomicity"], 10),
    ("abort-without-recording", &["multi-group-atomicity"], 10),
    ("ignore-prepared-on-commit", &["multi-group-atomicity"], 10),
    ("record-abort-blind", &["decision-stable"], 40),
    ("read-ignores-prepared", &["multi-group-atomicity"], 20),
    ("settled-read-ignores-in-flight", &["linearizable-eg"], 10),
    ("combine-conflicting", &["linearizable-eg"], 10),
    ("blind-write-forgets-locks", &["multi-group-atomicity"], 45),
    // In a test build, the replica's own assertion of locks-known catches it first.
    (
        "finish-frees-every-lock",
        &["multi-group-atomicity", "locks-known"],
        20,
    ),
    ("carry-skips-prepares", &["multi-group-atomicity"], 90),
    ("commit-past-span", &["durable-ack"], 15),
    (
        "relay-commits-duplicates",
        &["durable-ack", "queue-exactly-once-in-order"],
        140,
    ),
    ("relay-resolves-first-only", &["durable-ack"], 40),
    (
        "drop-invalidate-when-full",
        &["vouched-is-current", "visible-after-invalidate"],
        40,
    ),
    (
        "evict-dirty-group",
        &["acceptor-monotone", "single-value", "durable-ack"],
        40,
    ),
    ("skip-open-index", &["open-is-indexed"], 40),
    // Needs a seed with spares whose operator moves a range away from a server and
    // back while a group of it stays in that server's memory.
    (
        "keep-unserved-groups",
        &[
            "single-value",
            "ballot-zero-once",
            "acceptor-monotone",
            "durable-ack",
            "prefix-snapshots",
            "linearizable-eg",
            "moves-keep-writes",
        ],
        300,
    ),
    // The placement knobs need a seed with spares whose operator moves a slot.
    (
        "serve-while-frozen",
        &["one-server-per-slot", "moves-keep-writes"],
        20,
    ),
    ("finish-without-final-copy", &["moves-keep-writes"], 20),
    // Needs a seed with spares whose last move left a range of a slot at its spare.
    // (First caught at seed 42 since vouched reads long-poll.)
    ("scan-first-server-only", &["global-scan-complete"], 120),
    // Needs a seed whose operator removes the read-only replica and a client still
    // reading from it. (A removed witness that goes on serving gets no vote asked of
    // it that it would give: only proposers still counting the set before the removal
    // ask, and *votes-by-the-current-voters* refuses them.)
    (
        "serve-removed-slot",
        &["prefix-snapshots", "votes-where-placed"],
        30,
    ),
    // Needs a seed whose move's bulk copy takes pages after a write to a group an
    // earlier page copied, then a short final copy.
    ("track-changes-per-page", &["moves-keep-writes"], 120),
    // Needs a seed whose operator moves a full replica's slot away and back while its
    // home coordinator keeps a group it validated before the range left.
    (
        "vouch-moved-in-range",
        &["vouched-is-current", "visible-after-invalidate"],
        1000,
    ),
    // Needs a seed whose move's target takes pages before its placement shows the
    // move, then a late placement answer from before the move (newer than the one it
    // held) retires them: the global index rows the copy brought go with them.
    (
        "receive-before-seeing-move",
        &["moves-keep-writes", "global-index", "global-scan-complete"],
        450,
    ),
    // Needs a seed whose writer meets a coordinator whose lock lapsed while a move
    // gives its slot's range to another server: that server's coordinator, never
    // invalidated, vouches.
    (
        "trust-unconfirmed-lapse",
        &["vouched-is-current", "visible-after-invalidate"],
        400,
    ),
    // Needs a seed whose move's source crashes during the bulk copy, so that pages of
    // two of its processes make up the target's base (first caught at seed 1167 once
    // restarted servers read a placement they missed).
    ("delta-on-any-base", &["moves-keep-writes"], 1400),
    // Needs a seed whose operator removes a voter while a writer's accept round is
    // under way, the removed voter accepts after the writer read the placement
    // without it, and the remaining voters are too few without that vote (searched
    // from seed 9900: `SEARCH_FROM`).
    (
        "count-votes-of-removed",
        &["durable-ack", "visible-after-invalidate", "single-value"],
        60,
    ),
    // Needs a seed whose move the operator records frozen while the source's
    // coordinator has not read it, then a writer that counts that coordinator's
    // acknowledgement while the target's coordinator vouches (first caught at seed
    // 1076 once a replica's start pass lists the other replicas' registries, 870 and
    // 407 before; searched from seed 1050: `SEARCH_FROM`).
    (
        "record-frozen-unfenced",
        &["vouched-is-current", "visible-after-invalidate"],
        60,
    ),
    // A collection while a participant is still prepared: whoever settles it there
    // then finds no decision and records abort afresh (searched from seed 300:
    // `SEARCH_FROM`).
    ("collect-unfinished", &["decision-stable"], 60),
    // A decision read absent after its transaction finished and was collected, trusted:
    // a settle or resolution that read the record pending earlier records abort
    // afresh (first caught at seed 49 once a replica's start pass lists the other
    // replicas' registries; 756 before, since vouched reads long-poll).
    ("trust-absent-decision", &["decision-stable"], 120),
    // Decisions never old enough to collect: rows of finished transactions stay to the
    // run's end (first caught at seed 0).
    ("retention-unit-slip", &["decisions-collected"], 20),
    // Kept decision rows forgotten: a quiet group's last decisions, kept at the first
    // look (a participant not settled yet), stay (first caught at seed 0).
    ("forget-kept-decisions", &["decisions-collected"], 20),
    // A vouched read's long poll that waits only for the first position in flight and
    // serves the read whatever it answers (first caught at seed 28).
    ("awaited-read-short", &["linearizable-eg"], 60),
];

/// Knobs of moves between servers: only a seed whose world runs spare servers
/// (`SimConfig::spares`, about a quarter) has an operator that moves, so the others
/// cannot catch them and are not run.
const NEED_MOVES: &[&str] = &[
    "keep-unserved-groups",
    "serve-while-frozen",
    "finish-without-final-copy",
    "scan-first-server-only",
    "track-changes-per-page",
    "vouch-moved-in-range",
    "receive-before-seeing-move",
    "trust-unconfirmed-lapse",
    "delta-on-any-base",
    "record-frozen-unfenced",
];

/// Knobs of voter removals: only a seed with an operator that removes a replica
/// (`SimConfig::removals`, about a quarter) can catch them.
const NEED_REMOVALS: &[&str] = &["count-votes-of-removed"];

fn first_catch(knob: &str, seeds: std::ops::Range<u64>, checkers: &[&str]) -> Option<u64> {
    let bugs = bug(knob).expect("a known knob");
    let may_catch = |seed: u64| {
        (!NEED_MOVES.contains(&knob) || SimConfig::spares(seed))
            && (!NEED_REMOVALS.contains(&knob) || SimConfig::removals(seed).is_some())
    };
    seeds.filter(|seed| may_catch(*seed)).find(|seed| {
        // A knob may break a state machine's own assertion before any checker sees a
        // violation (`megastore-sim` reports that as "assertion"); that seed does not
        // count for the checkers — unless the assertion names one of them (an
        // invariant a state machine asserts itself): go on to the next.
        match std::panic::catch_unwind(|| run_seed(*seed, bugs, false)) {
            Ok(report) => report
                .violations
                .iter()
                .any(|v| checkers.contains(&v.invariant)),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or_default();
                checkers
                    .iter()
                    .any(|c| message.starts_with(&format!("{c}:")))
            }
        }
    })
}

/// Re-measures every knob's first catching seed (run after changing the fault model or
/// the workload, which changes every trace, then set the limits above with headroom):
/// `cargo test -p megastore-sim --test sim -- --ignored first_catches --nocapture`.
#[test]
#[ignore = "a measurement, minutes long"]
#[allow(clippy::print_stdout)] // the measurement is its output
fn first_catches() {
    for (knob, checkers, within) in CAUGHT {
        let caught = first_catch(knob, 0..3000, checkers);
        println!("{knob}: first caught at seed {caught:?} (limit {within})");
    }
}

/// Knobs that random seeds catch rarely on today's traces: their search starts at
/// this seed instead of 0 (the limit in [`CAUGHT`] counts from it), so that CI does
/// not run a thousand seeds to reach the first catch. A change that reshuffles the
/// traces moves these, like every first catch: re-measure with `first_catches`.
const SEARCH_FROM: &[(&str, u64)] = &[
    // First caught at seed 334 once a replica's start pass lists the other replicas'
    // registries (1116 before, none from 900, once the sweep probed busy and lacking
    // groups out of turn; 931 before that): a participant's finish rarely lags a
    // retention behind its decision.
    ("collect-unfinished", 300),
    // First caught at seed 1076 once a replica's start pass lists the other replicas'
    // registries (870 before, none below, once the sweep probed busy and lacking
    // groups out of turn).
    ("record-frozen-unfenced", 1050),
    // Caught at seed 9937 once a replica's start pass lists the other replicas'
    // registries: none of its checkers below 6,894 (seed 6894 by decisions-collected
    // only; 6,895–8,999 not searched, 9,000–9,936 none); 5013 before (none from
    // 2,400), 2433 before that.
    ("count-votes-of-removed", 9900),
];

macro_rules! knob_tests {
    ($($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                caught_within_its_limit(stringify!($test));
            }
        )*
        /// Every knob test, by name.
        const KNOB_TESTS: &[&str] = &[$(stringify!($test)),*];
    };
}

/// The test of a knob, named after it (`<knob>_is_caught`, its dashes underscores):
/// [`CAUGHT`] names its checkers and the seeds they catch it within, counted from its
/// [`SEARCH_FROM`] entry. By name, not by place in the list: a test found by index once
/// ran the next knob's check under its own name.
fn caught_within_its_limit(test: &str) {
    let knob = test
        .strip_suffix("_is_caught")
        .expect("a knob test's name ends in _is_caught")
        .replace('_', "-");
    let &(knob, checkers, within) = CAUGHT
        .iter()
        .find(|(k, _, _)| *k == knob)
        .unwrap_or_else(|| panic!("{test}: no knob {knob} in CAUGHT"));
    let from = SEARCH_FROM
        .iter()
        .find(|(k, _)| *k == knob)
        .map_or(0, |(_, from)| *from);
    let caught = first_catch(knob, from..from + within, checkers);
    assert!(
        caught.is_some(),
        "--bug {knob} was not caught by {checkers:?} within {within} seeds from {from}"
    );
}

#[test]
fn every_knob_in_caught_has_its_test() {
    for (knob, _, _) in CAUGHT {
        let test = format!("{}_is_caught", knob.replace('-', "_"));
        assert!(KNOB_TESTS.contains(&test.as_str()), "{knob}: no {test}");
    }
    assert_eq!(KNOB_TESTS.len(), CAUGHT.len(), "a knob tested twice");
}

knob_tests! {
    skip_invalidate_is_caught,
    grant_ballot0_twice_is_caught,
    validate_ignores_position_is_caught,
    validate_after_remote_catchup_is_caught,
    validate_without_lock_is_caught,
    invalidate_only_seen_lacking_is_caught,
    read_local_unvouched_is_caught,
    ack_before_invalidate_is_caught,
    learn_from_single_accept_is_caught,
    leader_from_unchosen_entry_is_caught,
    forget_promise_on_restart_is_caught,
    apply_out_of_order_is_caught,
    rejoin_as_voter_is_caught,
    resolve_without_settling_is_caught,
    release_while_vouching_is_caught,
    resolve_any_remembered_txn_is_caught,
    collect_without_floor_is_caught,
    read_at_position_reads_applied_is_caught,
    keep_state_across_epochs_is_caught,
    accept_persists_no_promise_is_caught,
    reply_before_sync_is_caught,
    global_copies_skip_deletes_is_caught,
    install_without_global_is_caught,
    verify_trusts_the_scan_is_caught,
    deliver_without_dedup_is_caught,
    consume_outside_txn_is_caught,
    batch_in_row_order_is_caught,
    decide_before_all_prepared_is_caught,
    abort_without_recording_is_caught,
    ignore_prepared_on_commit_is_caught,
    record_abort_blind_is_caught,
    read_ignores_prepared_is_caught,
    settled_read_ignores_in_flight_is_caught,
    combine_conflicting_is_caught,
    blind_write_forgets_locks_is_caught,
    carry_skips_prepares_is_caught,
    commit_past_span_is_caught,
    relay_commits_duplicates_is_caught,
    relay_resolves_first_only_is_caught,
    drop_invalidate_when_full_is_caught,
    evict_dirty_group_is_caught,
    skip_open_index_is_caught,
    keep_unserved_groups_is_caught,
    serve_while_frozen_is_caught,
    finish_without_final_copy_is_caught,
    scan_first_server_only_is_caught,
    serve_removed_slot_is_caught,
    track_changes_per_page_is_caught,
    vouch_moved_in_range_is_caught,
    receive_before_seeing_move_is_caught,
    trust_unconfirmed_lapse_is_caught,
    delta_on_any_base_is_caught,
    count_votes_of_removed_is_caught,
    record_frozen_unfenced_is_caught,
    collect_unfinished_is_caught,
    trust_absent_decision_is_caught,
    retention_unit_slip_is_caught,
    forget_kept_decisions_is_caught,
    awaited_read_short_is_caught,
    finish_frees_every_lock_is_caught,
}

#[test]
fn every_knob_has_a_name_the_command_line_accepts() {
    for name in BUG_NAMES {
        assert!(bug(name).is_some(), "{name}");
    }
    assert!(bug("no-such-bug").is_none());
    assert_eq!(BUG_NAMES.len(), 68);
}

/// docs/protocol.md and paper §4.6.3: an uncontended write at the leader's site costs one
/// round trip to the farthest full replica — it waits for every full replica to accept
/// or be invalidated. The witness is near, so a majority forms in 20 ms: a writer that
/// skipped the invalidation step would answer in about 22 ms.
#[test]
fn an_uncontended_fast_path_commit_takes_one_round_trip_to_the_farthest_full_replica() {
    let mut config = measure::three_sites_with_witness_at(80, 20, &[0]);
    config.writes_only = true;
    let m = measure::run(config, 1);
    assert_eq!(m.violations, 0);
    assert!(m.committed > 100, "{} commits", m.committed);
    let median_us = m.commit_latency_us.value_at_quantile(0.5);
    assert!(
        median_us <= 88_000,
        "median commit {median_us} µs is over 1.1 × the 80 ms round trip"
    );
    assert!(
        median_us >= 80_000,
        "median commit {median_us} µs is under a round trip to the far full replica"
    );
    assert!(
        m.fast_path_ratio() > 0.95,
        "fast path {:.2}",
        m.fast_path_ratio()
    );
    // The same scenario without the invalidation step answers early: the bound above
    // is what tells them apart.
    let mut config = measure::three_sites_with_witness_at(80, 20, &[0]);
    config.writes_only = true;
    let skipping = measure::run_with_bugs(config, 1, bug("skip-invalidate").expect("a known knob"));
    let skipping_us = skipping.commit_latency_us.value_at_quantile(0.5);
    assert!(
        skipping_us < 40_000,
        "without step 5 the median commit is {skipping_us} µs"
    );
}

#[test]
fn most_current_reads_are_local_when_nothing_fails() {
    let m = measure::run(measure::three_sites(80, &[0, 0, 1, 1]), 2);
    assert_eq!(m.violations, 0);
    assert!(
        m.local_read_share() > 0.9,
        "{:.2} of current reads were local",
        m.local_read_share()
    );
}
