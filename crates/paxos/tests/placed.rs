//! Replica cores placed over many servers (docs/protocol.md, "Placement"): each answers
//! only for the ranges its server holds, keeps only their groups in memory, and a move
//! — placement read, bulk copy, freeze, final copy, finish — hands a group from one
//! core to another with its whole state, long polls answered, the freeze durable and
//! the source's rows retired. With the `keep-unserved-groups` knob a range that comes
//! back is answered from the stale state in memory, which the move-back test catches.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_paxos::messages::{AcceptResult, ReplicaError};
use megastore_paxos::{
    ProtocolBugs, ReplicaInput, ReplicaReply, ReplicaRequest, SERVER_PLACEMENT_ROW, copy_range,
    group_state_spans, load_server_placement,
};
use megastore_placement::{
    Placement, PlacementBugs, Range, RangeId, ServerId, ServerPlacement, Version,
};
use megastore_rowstore::{Durability, KeyRange, LATEST, MemoryStore, RowRead, ScanOptions};
use megastore_types::{EgId, Position, ReplicaId, Time};
use support::{
    Node, accept, accept_result, ballot, eg, mark, replica_on, servers_0_and_1_at_site_1, topology,
    with_visible_first, write,
};

fn initial() -> Placement {
    Placement::initial(servers_0_and_1_at_site_1(), &topology(), 2).unwrap()
}

/// The range of the test group `g1`, and the server at site 1 that does not hold it.
fn moved_range(p: &Placement) -> (Range, ServerId, ServerId) {
    let range = p.range_of(&eg().0).clone();
    let from = range.slot(ReplicaId(1)).unwrap().server;
    let to = if from == ServerId(0) {
        ServerId(1)
    } else {
        ServerId(0)
    };
    (range, from, to)
}

fn keys(range: &Range) -> KeyRange {
    KeyRange {
        start: range.start.clone(),
        end: range.end.clone(),
    }
}

/// What `node` stored of its placement.
fn stored(node: &Node) -> ServerPlacement {
    let server = node.replica.placement().unwrap().server();
    load_server_placement(&node.store, server, PlacementBugs::NONE)
        .unwrap()
        .expect("a stored placement")
}

fn log_state(eg: &EgId) -> ReplicaRequest {
    ReplicaRequest::LogState {
        id: 3,
        eg: eg.clone(),
    }
}

fn refusal(reply: ReplicaReply) -> ReplicaError {
    match reply {
        ReplicaReply::Error { error, .. } => error,
        other => panic!("served: {other:?}"),
    }
}

/// A watcher's long poll on `g1` past position `past`.
fn long_poll(past: u64) -> ReplicaInput {
    ReplicaInput::Message {
        from: support::CLIENT,
        message: megastore_paxos::Message::ReplicaRequest(ReplicaRequest::AwaitVisible {
            id: 9,
            eg: eg(),
            past: Position(past),
            wait: Duration::from_secs(5),
        }),
    }
}

/// Every row the store holds in `span`, with its cells.
fn rows_in(store: &MemoryStore, span: &KeyRange) -> usize {
    store
        .scan(span, LATEST, &ScanOptions::default())
        .unwrap()
        .len()
}

/// Accepts and marks `entry` visible at `p` on `node` (ballot 1).
fn commit_at(node: &mut Node, p: u64, entry: megastore_paxos::LogEntry) {
    assert_eq!(
        accept_result(node.ask(accept(p, ballot(1), entry.clone(), false))),
        AcceptResult::Accepted
    );
    assert!(matches!(
        node.ask(mark(p, ballot(1), entry)),
        ReplicaReply::MarkedVisible { .. }
    ));
}

#[test]
fn a_placed_replica_answers_only_for_its_ranges_and_loads_nothing_else() {
    let p = initial();
    let (range, from, _) = moved_range(&p);
    let mut node = replica_on(from, &p, MemoryStore::new(), ProtocolBugs::NONE);
    // A group of the other range, whose replica-1 slot the other site-1 server holds.
    let elsewhere = EgId(b"\xf0elsewhere".to_vec());
    let other = p.range_of(&elsewhere.0).clone();
    assert_ne!(other.id, range.id);
    assert_eq!(
        refusal(node.ask(log_state(&elsewhere))),
        ReplicaError::WrongServer {
            range: other.id,
            epoch: other.epoch
        }
    );
    assert_eq!(
        node.replica.loaded_groups(),
        0,
        "a refused group is not loaded"
    );
    with_visible_first(&mut node, write(1, Some(1), "one"));
    assert_eq!(node.replica.loaded_groups(), 1);
}

#[test]
fn a_move_hands_a_group_from_one_core_to_another_with_its_whole_state() {
    let p0 = initial();
    let (range, from, to) = moved_range(&p0);
    let mut source = replica_on(from, &p0, MemoryStore::new(), ProtocolBugs::NONE);
    let mut target = replica_on(to, &p0, MemoryStore::new(), ProtocolBugs::NONE);
    with_visible_first(&mut source, write(1, Some(1), "one"));

    let p1 = p0.begin_move(range.id, ReplicaId(1), to).unwrap();
    let move_id = p1.version();
    // A source that has not read the move does not freeze for it.
    source.step_at(
        Time::ZERO,
        ReplicaInput::Freeze {
            range: range.id,
            move_id,
        },
    );
    assert!(source.replica.placement().unwrap().frozen().is_empty());
    for node in [&mut source, &mut target] {
        let (replies, _) = node.step_at(Time::ZERO, ReplicaInput::Placement(p1.clone()));
        assert!(replies.is_empty(), "{replies:?}");
    }
    // The target takes the copy, and serves none of the range until the move ends.
    assert!(
        target
            .replica
            .placement()
            .unwrap()
            .receive(range.id, move_id)
            .is_ok()
    );
    assert!(matches!(
        refusal(target.ask(log_state(&eg()))),
        ReplicaError::WrongServer { .. }
    ));
    copy_range(
        &source.store,
        &target.store,
        &keys(&range),
        2,
        Durability::Synced,
    )
    .unwrap();
    // Written at the source after the bulk copy.
    commit_at(&mut source, 2, write(2, Some(1), "two"));
    let state_before_freeze = source.ask(log_state(&eg()));
    let (held, _) = source.step_at(Time::ZERO, long_poll(2));
    assert!(held.is_empty(), "the long poll is held");

    let (answered, _) = source.step_at(
        Time::ZERO,
        ReplicaInput::Freeze {
            range: range.id,
            move_id,
        },
    );
    assert_eq!(
        answered,
        vec![ReplicaReply::Error {
            id: 9,
            error: ReplicaError::Frozen {
                range: range.id,
                move_id
            }
        }],
        "the held long poll is answered when its group leaves"
    );
    assert_eq!(source.replica.loaded_groups(), 0);
    assert_eq!(
        refusal(source.ask(log_state(&eg()))),
        ReplicaError::Frozen {
            range: range.id,
            move_id
        }
    );
    // The freeze was synced: a crash right after keeps it.
    source.store.crash();
    let mut source = replica_on(from, &p1, source.store, ProtocolBugs::NONE);
    assert_eq!(
        source.replica.placement().unwrap().frozen(),
        &BTreeMap::from([(range.id, move_id)])
    );
    assert!(matches!(
        refusal(source.ask(log_state(&eg()))),
        ReplicaError::Frozen { .. }
    ));

    copy_range(
        &source.store,
        &target.store,
        &keys(&range),
        2,
        Durability::Synced,
    )
    .unwrap();
    let p2 = p1
        .record_frozen(range.id, move_id)
        .unwrap()
        .finish_move(range.id, move_id)
        .unwrap();
    target.step_at(Time::ZERO, ReplicaInput::Placement(p2.clone()));
    assert_eq!(target.ask(log_state(&eg())), state_before_freeze);
    // It goes on where the source stopped: its promise and position 3.
    commit_at(&mut target, 3, write(3, Some(1), "three"));

    // The source drops its freeze and retires every row of the range.
    source.step_at(Time::ZERO, ReplicaInput::Placement(p2.clone()));
    assert!(stored(&source).frozen().is_empty());
    assert_eq!(stored(&source).view().version(), p2.version());
    for span in group_state_spans(&keys(&range)) {
        assert_eq!(rows_in(&source.store, &span), 0, "{span:?} retired");
    }
    assert_eq!(
        refusal(source.ask(log_state(&eg()))),
        ReplicaError::WrongServer {
            range: range.id,
            epoch: Version(p2.version().0)
        }
    );
    assert_eq!(
        rows_in(
            &source.store,
            &KeyRange::single(SERVER_PLACEMENT_ROW.to_vec())
        ),
        1
    );
}

#[test]
fn an_aborted_move_unfreezes_the_source_and_retires_the_targets_copy() {
    let p0 = initial();
    let (range, from, to) = moved_range(&p0);
    let mut source = replica_on(from, &p0, MemoryStore::new(), ProtocolBugs::NONE);
    let mut target = replica_on(to, &p0, MemoryStore::new(), ProtocolBugs::NONE);
    with_visible_first(&mut source, write(1, Some(1), "one"));
    let p1 = p0.begin_move(range.id, ReplicaId(1), to).unwrap();
    let move_id = p1.version();
    for node in [&mut source, &mut target] {
        node.step_at(Time::ZERO, ReplicaInput::Placement(p1.clone()));
    }
    copy_range(
        &source.store,
        &target.store,
        &keys(&range),
        2,
        Durability::Synced,
    )
    .unwrap();
    source.step_at(
        Time::ZERO,
        ReplicaInput::Freeze {
            range: range.id,
            move_id,
        },
    );
    assert!(matches!(
        refusal(source.ask(log_state(&eg()))),
        ReplicaError::Frozen { .. }
    ));

    let aborted = p1
        .record_frozen(range.id, move_id)
        .unwrap()
        .abort_move(range.id, move_id)
        .unwrap();
    source.step_at(Time::ZERO, ReplicaInput::Placement(aborted.clone()));
    assert!(stored(&source).frozen().is_empty());
    assert!(matches!(
        source.ask(log_state(&eg())),
        ReplicaReply::LogState { .. }
    ));
    commit_at(&mut source, 2, write(2, Some(1), "two"));

    target.step_at(Time::ZERO, ReplicaInput::Placement(aborted));
    for span in group_state_spans(&keys(&range)) {
        assert_eq!(
            rows_in(&target.store, &span),
            0,
            "{span:?} retired at the target"
        );
    }
}

/// Moves slot 1 of `range` from `from` to `to`, every step in order; the placement
/// that finished it.
fn move_slot(view: &Placement, range: RangeId, from: &mut Node, to: &mut Node) -> Placement {
    let target = to.replica.placement().unwrap().server();
    let begun = view.begin_move(range, ReplicaId(1), target).unwrap();
    let move_id = begun.version();
    for node in [&mut *from, &mut *to] {
        node.step_at(Time::ZERO, ReplicaInput::Placement(begun.clone()));
    }
    from.step_at(Time::ZERO, ReplicaInput::Freeze { range, move_id });
    let span = to
        .replica
        .placement()
        .unwrap()
        .receive(range, move_id)
        .unwrap();
    let span = KeyRange {
        start: span.start,
        end: span.end,
    };
    copy_range(&from.store, &to.store, &span, 2, Durability::Synced).unwrap();
    let done = begun
        .record_frozen(range, move_id)
        .unwrap()
        .finish_move(range, move_id)
        .unwrap();
    for node in [from, to] {
        node.step_at(Time::ZERO, ReplicaInput::Placement(done.clone()));
    }
    done
}

/// A group moves from X to Y, is written at Y, and moves back to X; X's answer.
fn move_away_and_back(bugs: ProtocolBugs) -> ReplicaReply {
    let p0 = initial();
    let (range, x_id, y_id) = moved_range(&p0);
    let mut x = replica_on(x_id, &p0, MemoryStore::new(), bugs);
    let mut y = replica_on(y_id, &p0, MemoryStore::new(), bugs);
    with_visible_first(&mut x, write(1, Some(1), "one"));
    let there = move_slot(&p0, range.id, &mut x, &mut y);
    commit_at(&mut y, 2, write(2, Some(1), "two at y"));
    move_slot(&there, range.id, &mut y, &mut x);
    x.ask(log_state(&eg()))
}

#[test]
fn a_group_that_moves_away_and_back_is_answered_from_the_copy_it_came_back_with() {
    match move_away_and_back(ProtocolBugs::NONE) {
        ReplicaReply::LogState { state, .. } => assert_eq!(state.visible, Position(2)),
        other => panic!("{other:?}"),
    }
    let stale = ProtocolBugs {
        keep_unserved_groups: true,
        ..ProtocolBugs::NONE
    };
    match move_away_and_back(stale) {
        ReplicaReply::LogState { state, .. } => assert_eq!(
            state.visible,
            Position(1),
            "with keep-unserved-groups, the old state in memory shadows the copy"
        ),
        other => panic!("{other:?}"),
    }
}

/// How many groups Y holds in memory right after a move from X brings it `g1`, whose
/// position 2 X accepted but no one made visible (work left), with `bugs`.
fn loaded_on_arrival(bugs: ProtocolBugs) -> usize {
    let p0 = initial();
    let (range, x_id, y_id) = moved_range(&p0);
    let mut x = replica_on(x_id, &p0, MemoryStore::new(), bugs);
    let mut y = replica_on(y_id, &p0, MemoryStore::new(), bugs);
    with_visible_first(&mut x, write(1, Some(1), "one"));
    assert_eq!(
        accept_result(x.ask(accept(2, ballot(1), write(2, Some(1), "two"), false))),
        AcceptResult::Accepted
    );
    assert_eq!(y.replica.loaded_groups(), 0, "y serves nothing of g1 yet");
    move_slot(&p0, range.id, &mut x, &mut y);
    y.replica.loaded_groups()
}

/// *arrivals-are-looked-after*: a group with work left that moves to a server is loaded
/// there as soon as the server serves its range, so its sweep settles it without
/// waiting for a request.
#[test]
fn a_received_group_with_work_left_is_loaded_as_its_range_arrives() {
    assert_eq!(loaded_on_arrival(ProtocolBugs::NONE), 1);
    let ignoring = ProtocolBugs {
        ignore_arrivals: true,
        ..ProtocolBugs::NONE
    };
    assert_eq!(
        loaded_on_arrival(ignoring),
        0,
        "with ignore-arrivals, the received group waits for a request"
    );
}

/// A global index scan names the placement version it chose its servers by: a server
/// judging by a newer one refuses it, naming its own (a move may have given its groups
/// to a server the scan did not ask); one routed by the same or a newer version, or by
/// none, is answered.
#[test]
fn a_global_scan_routed_by_an_older_placement_is_refused_naming_the_newer_one() {
    let p = initial();
    let (range, from, to) = moved_range(&p);
    let mut node = replica_on(from, &p, MemoryStore::new(), ProtocolBugs::NONE);
    let newer = p.begin_move(range.id, ReplicaId(1), to).unwrap();
    node.step_at(Time::ZERO, ReplicaInput::Placement(newer.clone()));
    let scan = |routed_by| ReplicaRequest::ScanGlobal {
        id: 4,
        range: megastore_paxos::global_index_range(),
        limit: None,
        reverse: false,
        server: Some(from),
        routed_by,
    };
    assert_eq!(
        refusal(node.ask(scan(Some(p.version())))),
        ReplicaError::PlacementNewer {
            version: newer.version()
        }
    );
    for routed_by in [Some(newer.version()), None] {
        assert!(
            matches!(node.ask(scan(routed_by)), ReplicaReply::Data { .. }),
            "routed by {routed_by:?}"
        );
    }
}

/// *votes-by-the-current-voters*: once a replica read that its range's voter set
/// changed, it refuses the votes of a proposer still counting the set before
/// (`WrongServer`, so the proposer reads the placement), and gives them to one that
/// counts the new set; with the `count-stale-voters` knob it gives them to both.
#[test]
fn a_placed_replica_refuses_votes_asked_by_a_proposer_counting_an_older_voter_set() {
    for (bugs, refuses) in [
        (PlacementBugs::NONE, true),
        (
            PlacementBugs {
                count_stale_voters: true,
                ..PlacementBugs::NONE
            },
            false,
        ),
    ] {
        let p = initial();
        let (range, from, _) = moved_range(&p);
        let placement = ServerPlacement::new(from, p.clone(), BTreeMap::new(), bugs).0;
        let mut node = Node::placed_over(1, placement, MemoryStore::new(), ProtocolBugs::NONE);
        let removed = p.remove_replica(ReplicaId(3), &[range.id]).unwrap();
        let since = removed.range(range.id).unwrap().voters_since;
        node.step_at(Time::ZERO, ReplicaInput::Placement(removed.clone()));
        let prepare = |voters_at| ReplicaRequest::Prepare {
            id: 5,
            eg: eg(),
            position: Position(1),
            ballot: ballot(2),
            voters_at,
        };
        let stale = node.ask(prepare(Version(0)));
        if refuses {
            assert_eq!(
                refusal(stale),
                ReplicaError::WrongServer {
                    range: range.id,
                    epoch: removed.range(range.id).unwrap().epoch
                }
            );
        } else {
            assert!(matches!(stale, ReplicaReply::Prepare { .. }), "{stale:?}");
        }
        let current = node.ask(prepare(since));
        assert!(
            matches!(current, ReplicaReply::Prepare { .. }),
            "{current:?}"
        );
        // A proposer counting the new set votes as before: its accept is taken.
        let request = ReplicaRequest::Accept {
            id: 6,
            eg: eg(),
            position: Position(1),
            ballot: ballot(3),
            entry: write(1, Some(1), "one"),
            grant: false,
            previous_visible: None,
            voters_at: since,
        };
        assert_eq!(accept_result(node.ask(request)), AcceptResult::Accepted);
    }
}

/// Replica 1's core on `server` with a sweep (what a voter catch-up pass works
/// through), judging by `view`.
fn swept_replica_on(
    server: ServerId,
    view: &Placement,
    bugs: ProtocolBugs,
) -> megastore_paxos::Replica {
    let config = megastore_paxos::ReplicaConfig {
        id: ReplicaId(1),
        topology: topology(),
        bugs,
        sweep: Some(support::sweep_of_replica_1(64)),
        rejoining: false,
        cache_groups: None,
    };
    let placement =
        ServerPlacement::new(server, view.clone(), BTreeMap::new(), PlacementBugs::NONE).0;
    megastore_paxos::Replica::new(config).placed(placement)
}

/// What one step of `replica` over `store` sent, and the voter catch-up passes that
/// ended in it.
type PassStep = (
    Vec<(megastore_types::NodeId, megastore_paxos::Message)>,
    Vec<megastore_paxos::VoterPassReport>,
);

fn pass_step(
    replica: &mut megastore_paxos::Replica,
    store: &MemoryStore,
    input: ReplicaInput,
) -> PassStep {
    let mut batch = megastore_paxos::Batch::new();
    replica
        .step_into(Time::ZERO, input, store, &mut batch)
        .unwrap();
    let passes = batch.take_voter_passes();
    (batch.release(store).unwrap().sends, passes)
}

/// Witness 3 removed from `g1`'s range of `p`: the range, the removal's version, and
/// replica 1's core (with a sweep, and `bugs`) on the server holding its slot of it,
/// judging by the new placement, with position 1 of `g1` visible in `store`.
fn after_witness_removal(
    p: &Placement,
    store: &MemoryStore,
    bugs: ProtocolBugs,
) -> (Range, Version, megastore_paxos::Replica) {
    let (range, from, _) = moved_range(p);
    let removed = p.remove_replica(ReplicaId(3), &[range.id]).unwrap();
    let changed_at = removed.range(range.id).unwrap().voters_changed.unwrap();
    let mut replica = swept_replica_on(from, &removed, bugs);
    let entry = write(1, Some(1), "one");
    for request in [
        accept(1, ballot(1), entry.clone(), false),
        mark(1, ballot(1), entry),
    ] {
        let message = megastore_paxos::Message::ReplicaRequest(request);
        let from = support::CLIENT;
        pass_step(&mut replica, store, ReplicaInput::Message { from, message });
    }
    (range, changed_at, replica)
}

/// A voter catch-up pass over a range whose witness was removed: the replica lists
/// the range's groups, probes each at the other members of the set, and reports the
/// group held once a majority of the voters left (both full replicas) have its log
/// visible up to the highest position either knew of. Asked about another change,
/// or at a replica that reads an older placement, it refuses by name.
#[test]
fn a_voter_catch_up_pass_reports_each_group_held_by_a_majority_of_the_voters_left() {
    let p = initial();
    let store = MemoryStore::new();
    let (range, changed_at, mut replica) = after_witness_removal(&p, &store, ProtocolBugs::NONE);
    let run = |replica: &mut megastore_paxos::Replica, input| pass_step(replica, &store, input);
    // Another change than the range's: refused at once.
    let (_, passes) = run(
        &mut replica,
        ReplicaInput::CatchUpVoters {
            range: range.id,
            changed_at: Version(changed_at.0 + 5),
        },
    );
    assert!(matches!(
        passes[..],
        [megastore_paxos::VoterPassReport {
            outcome: Err(megastore_paxos::VoterPassRefused::NotThatChange { .. }),
            ..
        }]
    ));
    let (sends, passes) = run(
        &mut replica,
        ReplicaInput::CatchUpVoters {
            range: range.id,
            changed_at,
        },
    );
    assert!(passes.is_empty(), "{passes:?}");
    let probes: Vec<(ReplicaId, u64)> = sends
        .iter()
        .filter_map(|(to, m)| match (to, m) {
            (
                megastore_types::NodeId::Replica(r),
                megastore_paxos::Message::ReplicaRequest(ReplicaRequest::LogState { id, eg: g }),
            ) if *g == eg() => Some((*r, *id)),
            _ => None,
        })
        .collect();
    let asked: Vec<ReplicaId> = probes.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        asked,
        [ReplicaId(2), ReplicaId(4)],
        "the set without the witness"
    );
    // The other full replica has it visible too: a majority of {1, 2} hold it.
    let mut reports = Vec::new();
    for (r, id) in probes {
        let visible = if r == ReplicaId(2) { 1 } else { 0 };
        let state = megastore_paxos::LogState {
            highest: Position(visible),
            visible: Position(visible),
            applied: Position(visible),
            truncated: Position(0),
            next_leader: None,
        };
        let (_, passes) = run(
            &mut replica,
            ReplicaInput::Message {
                from: megastore_types::NodeId::Replica(r),
                message: megastore_paxos::Message::ReplicaReply(ReplicaReply::LogState {
                    id,
                    state,
                }),
            },
        );
        reports.extend(passes);
    }
    assert_eq!(
        reports,
        [megastore_paxos::VoterPassReport {
            range: range.id,
            changed_at,
            outcome: Ok(megastore_paxos::VoterPassHeld {
                held: 1,
                not_held: 0,
                named: Vec::new(),
            }),
        }]
    );
    // A server whose placement is from before the change cannot vouch for it.
    let from = range.slot(ReplicaId(1)).unwrap().server;
    let mut behind = swept_replica_on(from, &p, ProtocolBugs::NONE);
    let (_, passes) = run(
        &mut behind,
        ReplicaInput::CatchUpVoters {
            range: range.id,
            changed_at,
        },
    );
    assert!(matches!(
        passes[..],
        [megastore_paxos::VoterPassReport {
            outcome: Err(megastore_paxos::VoterPassRefused::NotThatChange { shows: None, .. }),
            ..
        }]
    ));
}

/// A pass whose probe finds the other voter left lacking the log does not report the
/// group held: it settles what is lacking and probes again. With the
/// `skip-voter-catch-up` knob it reports the group held without asking anyone.
#[test]
fn a_voter_catch_up_pass_does_not_report_a_group_held_by_too_few_voters() {
    for (bugs, reported_at_once) in [
        (ProtocolBugs::NONE, false),
        (
            ProtocolBugs {
                skip_voter_catch_up: true,
                ..ProtocolBugs::NONE
            },
            true,
        ),
    ] {
        let p = initial();
        let store = MemoryStore::new();
        let (range, changed_at, mut replica) = after_witness_removal(&p, &store, bugs);
        let mut run = |input| pass_step(&mut replica, &store, input);
        let (sends, mut passes) = run(ReplicaInput::CatchUpVoters {
            range: range.id,
            changed_at,
        });
        // The other full replica answers that it lacks position 1.
        for (to, message) in sends {
            let (
                megastore_types::NodeId::Replica(r),
                megastore_paxos::Message::ReplicaRequest(ReplicaRequest::LogState { id, .. }),
            ) = (to, message)
            else {
                continue;
            };
            let state = megastore_paxos::LogState {
                highest: Position(1),
                ..megastore_paxos::LogState::default()
            };
            let (_, more) = run(ReplicaInput::Message {
                from: megastore_types::NodeId::Replica(r),
                message: megastore_paxos::Message::ReplicaReply(ReplicaReply::LogState {
                    id,
                    state,
                }),
            });
            passes.extend(more);
        }
        let held = passes
            .iter()
            .any(|p| matches!(&p.outcome, Ok(found) if found.held == 1));
        assert_eq!(held, reported_at_once, "{passes:?}");
    }
}
