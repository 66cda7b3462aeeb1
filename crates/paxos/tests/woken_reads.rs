//! A current read that finds its client's own commit in flight at the local replica
//! stops waiting when that commit settles (docs/protocol.md, "Combining commits",
//! step 8): it asks again at once, after the commit's visible marks, instead of
//! waiting out its learn and the patience after it. One that finds another writer's
//! entry in flight there is served as soon as the local replica has it visible (its
//! long poll, docs/protocol.md "Current read, vouched: local"), without its learn's
//! remote answers. Driven message by message against in-memory replicas, with the
//! clock stopped: without the wake or the long poll the read could only end on a later
//! tick.

mod support;

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use std::time::Duration;

use megastore_paxos::{
    ClientCore, ClientInput, ClientOutput, CommitResult, DataQuery, LogEntry, Message, OpId,
    OpResult, ReadMode, ReadSet, ReplicaReply, ReplicaRequest,
};
use megastore_types::{Epoch, NodeId, Position, ReplicaId, Time, TxnId};
use support::Node;

/// Four in-memory replicas (full 1 and 2, witness 3, read-only 4), position 1
/// visible at each; a client core at site 1 (local replica 1) with the clock stopped.
struct Cluster {
    nodes: Vec<Node>,
    client: ClientCore,
    now: Time,
    /// Replies `carry` kept back instead of delivering.
    held: Vec<(ReplicaId, ReplicaReply)>,
}

impl Cluster {
    fn new() -> Self {
        let first = support::write(1, Some(1), "one");
        let nodes = (1..=4)
            .map(|id| {
                let mut node = Node::new(id);
                // Voters accept it; every replica (the read-only one from the mark
                // alone) has it visible.
                node.ask(support::accept(1, support::ballot(1), first.clone(), false));
                let marked = node.ask(support::mark(1, support::ballot(1), first.clone()));
                assert!(
                    matches!(marked, ReplicaReply::MarkedVisible { .. }),
                    "{marked:?}"
                );
                node
            })
            .collect();
        Cluster {
            nodes,
            client: support::client_core(support::topology()),
            now: Time::ZERO + Duration::from_secs(1),
            held: Vec::new(),
        }
    }

    fn node(&mut self, r: ReplicaId) -> &mut Node {
        &mut self.nodes[usize::from(r.0) - 1]
    }

    fn step(&mut self, input: ClientInput) -> Vec<ClientOutput> {
        self.client.step(self.now, input)
    }

    /// Carries `outputs` out, and everything they lead to, without ticking: requests
    /// `hold_reply` picks (by replica and request) are delivered but their replies
    /// held; the local coordinator vouches. Returns the operations that ended.
    fn carry(
        &mut self,
        mut outputs: Vec<ClientOutput>,
        hold_reply: impl Fn(ReplicaId, &ReplicaRequest) -> bool,
    ) -> Vec<(OpId, OpResult)> {
        let mut done = Vec::new();
        for _ in 0..100 {
            let mut inputs = Vec::new();
            for output in outputs.drain(..) {
                match output {
                    ClientOutput::Send {
                        to: NodeId::Replica(r),
                        message: Message::ReplicaRequest(request),
                    } => {
                        let hold = hold_reply(r, &request);
                        for reply in self.node(r).ask_all(request) {
                            if hold {
                                self.held.push((r, reply));
                            } else {
                                inputs.push((NodeId::Replica(r), Message::ReplicaReply(reply)));
                            }
                        }
                    }
                    ClientOutput::Send {
                        to: NodeId::Coordinator(r),
                        message: Message::CoordinatorRequest(CoordinatorRequest::Query { id, .. }),
                    } => inputs.push((
                        NodeId::Coordinator(r),
                        Message::CoordinatorReply(CoordinatorReply::Query {
                            id,
                            vouched: true,
                            epoch: Some(Epoch(1)),
                            retired: false,
                        }),
                    )),
                    ClientOutput::Done { op, result } => done.push((op, result)),
                    _ => {}
                }
            }
            if inputs.is_empty() {
                return done;
            }
            for (from, message) in inputs {
                let out = self.step(ClientInput::Message { from, message });
                outputs.extend(out);
            }
        }
        panic!("the messages did not stop");
    }

    /// Delivers the replies `carry` held, in order; returns what the client sent in
    /// answer, not carried out.
    fn release_held(&mut self) -> Vec<ClientOutput> {
        let mut outputs = Vec::new();
        for (from, reply) in std::mem::take(&mut self.held) {
            outputs.extend(self.step(ClientInput::Message {
                from: NodeId::Replica(from),
                message: Message::ReplicaReply(reply),
            }));
        }
        outputs
    }
}

fn remote(r: ReplicaId) -> bool {
    r != ReplicaId(1)
}

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: megastore_types::ClientId(1),
        seq,
    }
}

/// The operations of [`read_behind_commit`].
struct Scenario {
    /// Transaction 1's commit, in flight at position 2.
    commit: OpId,
    /// Transaction 2's, waiting in the lane behind it (if asked for).
    waiting: Option<OpId>,
    /// The current read that found position 2 in flight.
    read: OpId,
}

/// Transaction 1's commit in flight at position 2: the leader (1) granted and
/// accepted; the remote voters accepted, and their answers are held (the round trip
/// in flight). With `waiting`, transaction 2 (a blind write read at 1) waits in the
/// lane behind it. Then a current read: vouched, the local replica answers with
/// position 2 in flight, and the read learns it; the remote answers are held too.
fn read_behind_commit(cluster: &mut Cluster, waiting: bool) -> Scenario {
    let eg = support::eg();
    let commit_at_1 = |cluster: &mut Cluster, seq| {
        cluster.client.commit(
            cluster.now,
            txn(seq),
            eg.clone(),
            Position(1),
            Some(ReplicaId(1)),
            support::row_writes(),
            ReadSet::default(),
        )
    };
    let (commit, outputs) = commit_at_1(cluster, 1);
    let ended = cluster.carry(outputs, |r, request| {
        remote(r) && matches!(request, ReplicaRequest::Accept { .. })
    });
    assert!(
        ended.is_empty(),
        "the commit waits for its voters: {ended:?}"
    );
    let waiting = waiting.then(|| {
        let (op, outputs) = commit_at_1(cluster, 2);
        assert!(
            !outputs
                .iter()
                .any(|o| matches!(o, ClientOutput::Send { .. })),
            "transaction 2 waits in the lane: {outputs:?}"
        );
        op
    });
    let (read, outputs) = cluster.client.read(
        cluster.now,
        eg.clone(),
        ReadMode::Current,
        DataQuery::Rows(vec![[&eg.0[..], b"\x01k"].concat()]),
    );
    let ended = cluster.carry(outputs, |r, request| {
        remote(r) && matches!(request, ReplicaRequest::ReadLog { .. })
    });
    assert!(
        ended.is_empty(),
        "the read waits for the write in flight: {ended:?}"
    );
    Scenario {
        commit,
        waiting,
        read,
    }
}

/// The result of operation `op` among `ended`.
fn result_of(ended: &[(OpId, OpResult)], op: OpId) -> Option<&OpResult> {
    ended.iter().find(|(o, _)| *o == op).map(|(_, r)| r)
}

/// Whether `result` is a commit at `at`.
fn committed_at(result: Option<&OpResult>, at: Position) -> bool {
    matches!(
        result,
        Some(OpResult::Commit {
            result: CommitResult::Committed { position, .. },
            ..
        }) if *position == at
    )
}

/// The entries the client proposes at `position` among `outputs`.
fn proposed_at(outputs: &[ClientOutput], at: Position) -> Vec<LogEntry> {
    outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                message:
                    Message::ReplicaRequest(ReplicaRequest::Accept {
                        position, entry, ..
                    }),
                ..
            } if *position == at => Some(entry.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_read_behind_its_clients_commit_asks_again_when_the_commit_settles() {
    let mut cluster = Cluster::new();
    let scenario = read_behind_commit(&mut cluster, false);

    // The commit's accepts come back: it is chosen and marked visible, and in the same
    // step the read asks the local replica again, after the mark.
    let outputs = cluster.release_held();
    let to_local: Vec<&ReplicaRequest> = outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                to: NodeId::Replica(ReplicaId(1)),
                message: Message::ReplicaRequest(request),
            } => Some(request),
            _ => None,
        })
        .collect();
    let mark = to_local.iter().position(
        |r| matches!(r, ReplicaRequest::MarkVisible { position, .. } if *position == Position(2)),
    );
    let learn = to_local.iter().position(
        |r| matches!(r, ReplicaRequest::ReadLog { position, .. } if *position == Position(2)),
    );
    assert!(
        mark.is_some() && learn.is_some() && mark < learn,
        "the mark, then the read's learn again, to the local replica: {to_local:?}"
    );

    // Carried out with the clock still stopped, both end: the read at position 2.
    let ended = cluster.carry(outputs, |_, _| false);
    assert!(
        committed_at(result_of(&ended, scenario.commit), Position(2)),
        "{ended:?}"
    );
    match result_of(&ended, scenario.read) {
        Some(OpResult::Read(Ok(result))) => {
            assert_eq!(result.position, Some(Position(2)));
            let values: Vec<_> = result.rows.iter().map(|row| row.value(b"v")).collect();
            assert_eq!(
                values,
                [Some(&b"x"[..])],
                "the read sees the commit's write"
            );
        }
        other => panic!("the read did not end without a tick: {other:?}"),
    }
}

/// The commit took `took`; its accepts come back and the read wakes. Asserts that the
/// waiting transaction is not proposed yet (the lane lingers), carries everything out
/// without ticking, and returns where the read read.
fn settle_and_linger(cluster: &mut Cluster, scenario: &Scenario, took: Duration) -> Position {
    cluster.now = cluster.now + took;
    let outputs = cluster.release_held();
    assert!(
        proposed_at(&outputs, Position(3)).is_empty(),
        "the lane lingers for the woken read's transaction: {outputs:?}"
    );
    let ended = cluster.carry(outputs, |_, _| false);
    assert!(committed_at(
        result_of(&ended, scenario.commit),
        Position(2)
    ));
    assert!(result_of(&ended, scenario.waiting.expect("one waits")).is_none());
    match result_of(&ended, scenario.read) {
        Some(OpResult::Read(Ok(result))) => result.position.expect("a current read's position"),
        other => panic!("the read did not end: {other:?}"),
    }
}

#[test]
fn the_next_entry_lingers_for_the_woken_reads_transaction_and_carries_it() {
    let mut cluster = Cluster::new();
    let scenario = read_behind_commit(&mut cluster, true);
    let read_at = settle_and_linger(&mut cluster, &scenario, Duration::from_millis(80));
    assert_eq!(read_at, Position(2));

    // The reader commits: the lane stops lingering, and one entry at position 3
    // carries the transaction that waited and the reader's.
    let (reader, outputs) = cluster.client.commit(
        cluster.now,
        txn(3),
        support::eg(),
        read_at,
        Some(ReplicaId(1)),
        support::row_writes(),
        ReadSet::default(),
    );
    let proposed = proposed_at(&outputs, Position(3));
    assert!(
        !proposed.is_empty() && proposed.iter().all(|e| e.holds(txn(2)) && e.holds(txn(3))),
        "one entry at 3 for both: {proposed:?}"
    );
    let ended = cluster.carry(outputs, |_, _| false);
    for op in [scenario.waiting.expect("one waits"), reader] {
        assert!(
            committed_at(result_of(&ended, op), Position(3)),
            "{ended:?}"
        );
    }
}

#[test]
fn a_linger_ends_after_a_quarter_of_the_commits_time() {
    let mut cluster = Cluster::new();
    let scenario = read_behind_commit(&mut cluster, true);
    settle_and_linger(&mut cluster, &scenario, Duration::from_millis(80));
    let settled = cluster.now;
    // The reader never commits (a read-only transaction): 20 ms later the waiting
    // transaction goes alone, at the next tick.
    cluster.now = settled + Duration::from_millis(19);
    let outputs = cluster.step(ClientInput::Tick);
    assert!(proposed_at(&outputs, Position(3)).is_empty(), "{outputs:?}");
    let wake = outputs.iter().find_map(|o| match o {
        ClientOutput::WakeAt(at) => Some(*at),
        _ => None,
    });
    assert_eq!(wake, Some(settled + Duration::from_millis(20)));
    cluster.now = settled + Duration::from_millis(20);
    let outputs = cluster.step(ClientInput::Tick);
    let proposed = proposed_at(&outputs, Position(3));
    assert!(
        !proposed.is_empty() && proposed.iter().all(|e| e.holds(txn(2)) && !e.holds(txn(3))),
        "{proposed:?}"
    );
    let ended = cluster.carry(outputs, |_, _| false);
    assert!(committed_at(
        result_of(&ended, scenario.waiting.expect("one waits")),
        Position(3)
    ));
}

#[test]
fn a_read_that_finds_another_writers_entry_in_flight_is_served_when_its_replica_marks_it() {
    let mut cluster = Cluster::new();
    let eg = support::eg();
    // Another client's entry at position 2, accepted by the local replica (1) alone:
    // its writer's round trip to the other voters is under way.
    let other = TxnId {
        client: megastore_types::ClientId(2),
        seq: 1,
    };
    let entry = LogEntry::combining([(other, support::row_writes())], Some(ReplicaId(1)));
    let ballot = support::ballot(1);
    let accepted = cluster
        .node(ReplicaId(1))
        .ask(support::accept(2, ballot, entry.clone(), false));
    assert!(
        matches!(accepted, ReplicaReply::Accept { .. }),
        "{accepted:?}"
    );

    // The read: vouched, it finds position 2 in flight; the remote voters' answers to
    // its learn are held (a round trip away), and its long poll is held at replica 1.
    let (read, outputs) = cluster.client.read(
        cluster.now,
        eg.clone(),
        ReadMode::Current,
        DataQuery::Rows(vec![[&eg.0[..], b"\x01k"].concat()]),
    );
    let ended = cluster.carry(outputs, |r, _| remote(r));
    assert!(ended.is_empty(), "the read waits for position 2: {ended:?}");

    // The writer learned its entry chosen and marks it visible at replica 1, which
    // answers the read's long poll in the same step.
    let released = cluster
        .node(ReplicaId(1))
        .ask_all(support::mark(2, ballot, entry));
    let mut outputs = Vec::new();
    for reply in released {
        if matches!(reply, ReplicaReply::LogState { .. }) {
            outputs.extend(cluster.step(ClientInput::Message {
                from: NodeId::Replica(ReplicaId(1)),
                message: Message::ReplicaReply(reply),
            }));
        }
    }
    assert!(!outputs.is_empty(), "the long poll was answered");
    let ended = cluster.carry(outputs, |r, _| remote(r));
    match result_of(&ended, read) {
        Some(OpResult::Read(Ok(result))) => {
            assert_eq!(result.position, Some(Position(2)), "{result:?}");
            assert_eq!(result.rows.len(), 1, "the entry's row: {result:?}");
        }
        other => panic!("the read ended with no remote answer: {other:?}"),
    }
    assert!(!cluster.held.is_empty(), "the remote voters never answered");
}
