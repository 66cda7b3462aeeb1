//! A replica with a bounded group cache (`ReplicaConfig::cache_groups`): it keeps only
//! that many quiescent groups in memory, loses nothing by dropping one (promises,
//! accepted values and watermarks come back from the root row), keeps the groups with
//! work left, and registers exactly the groups it persisted.

mod support;

use megastore_paxos::messages::{AcceptResult, PrepareResult};
use megastore_paxos::{
    Batch, CellWrite, LogEntry, Message, ProtocolBugs, Replica, ReplicaConfig, ReplicaInput,
    ReplicaReply, ReplicaRequest, RowWrite, list_groups,
};
use megastore_rowstore::MemoryStore;
use megastore_types::{Ballot, ClientId, EgId, Position, ProposerId, ReplicaId, Time, TxnId};

use support::{CLIENT, topology};

const CACHE: usize = 2;

struct Cached {
    replica: Replica,
    store: MemoryStore,
}

impl Cached {
    fn new() -> Self {
        Self {
            replica: Replica::new(ReplicaConfig {
                id: ReplicaId(1),
                topology: topology(),
                bugs: ProtocolBugs::NONE,
                sweep: None,
                rejoining: false,
                cache_groups: Some(CACHE),
            }),
            store: MemoryStore::new(),
        }
    }

    fn ask(&mut self, request: ReplicaRequest) -> ReplicaReply {
        let mut batch = Batch::new();
        let input = ReplicaInput::Message {
            from: CLIENT,
            message: Message::ReplicaRequest(request),
        };
        self.replica
            .step_into(Time::ZERO, input, &self.store, &mut batch)
            .unwrap();
        let mut replies: Vec<ReplicaReply> = batch
            .release(&self.store)
            .unwrap()
            .sends
            .into_iter()
            .filter_map(|(_, m)| match m {
                Message::ReplicaReply(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(replies.len(), 1, "{replies:?}");
        replies.pop().unwrap()
    }
}

fn group(i: usize) -> EgId {
    EgId(format!("\u{fe}g{i}\u{0}").into_bytes())
}

fn entry(eg: &EgId, seq: u64) -> LogEntry {
    LogEntry {
        txn: Some(TxnId {
            client: ClientId(1),
            seq,
        }),
        next_leader: Some(ReplicaId(1)),
        writes: vec![RowWrite {
            row: [eg.0.clone(), b"\x01k".to_vec()].concat(),
            cells: vec![CellWrite::Set {
                column: b"v".to_vec(),
                value: seq.to_be_bytes().to_vec(),
            }],
        }],
        ..LogEntry::noop()
    }
}

fn ballot(round: u64) -> Ballot {
    Ballot {
        round,
        proposer: ProposerId::client(ClientId(1)),
    }
}

fn accept(eg: &EgId, p: u64, round: u64) -> ReplicaRequest {
    ReplicaRequest::Accept {
        id: 1,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(round),
        entry: entry(eg, p),
        grant: false,
        previous_visible: None,
        voters_at: megastore_placement::Version(0),
    }
}

fn mark(eg: &EgId, p: u64, round: u64) -> ReplicaRequest {
    ReplicaRequest::MarkVisible {
        id: 2,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(round),
        entry: entry(eg, p),
    }
}

fn prepare(eg: &EgId, p: u64, round: u64) -> ReplicaRequest {
    ReplicaRequest::Prepare {
        id: 3,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(round),
        voters_at: megastore_placement::Version(0),
    }
}

#[test]
fn a_bounded_cache_keeps_its_bound_and_forgets_nothing_it_evicts() {
    let mut node = Cached::new();
    let groups: Vec<EgId> = (0..10).map(group).collect();
    for eg in &groups {
        assert_eq!(
            node.ask(accept(eg, 1, 1)),
            ReplicaReply::Accept {
                id: 1,
                result: AcceptResult::Accepted
            }
        );
        assert!(matches!(
            node.ask(mark(eg, 1, 1)),
            ReplicaReply::MarkedVisible { .. }
        ));
        // A promise at position 2, which only the root row keeps once the group leaves.
        assert!(matches!(
            node.ask(prepare(eg, 2, 5)),
            ReplicaReply::Prepare {
                result: PrepareResult::Promised(None),
                ..
            }
        ));
        assert!(node.replica.loaded_groups() <= CACHE, "the bound holds");
    }
    assert!(node.replica.evictions() >= 8);
    for eg in &groups {
        // Loaded again from its root row: the promise holds, the position is applied.
        assert!(matches!(
            node.ask(accept(eg, 2, 3)),
            ReplicaReply::Accept {
                result: AcceptResult::Rejected { promised },
                ..
            } if promised == ballot(5)
        ));
        match node.ask(ReplicaRequest::LogState {
            id: 4,
            eg: eg.clone(),
        }) {
            ReplicaReply::LogState { state, .. } => {
                assert_eq!((state.visible, state.applied), (Position(1), Position(1)));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(list_groups(&node.store, None, 100).unwrap(), groups);
}

#[test]
fn a_group_with_work_left_stays_loaded_and_one_only_read_is_never_registered() {
    let mut node = Cached::new();
    let busy = group(0);
    // Accepted, never marked visible: the sweep must still see it.
    assert!(matches!(
        node.ask(accept(&busy, 1, 1)),
        ReplicaReply::Accept {
            result: AcceptResult::Accepted,
            ..
        }
    ));
    for i in 1..8 {
        node.ask(ReplicaRequest::LogState {
            id: 4,
            eg: group(i),
        });
    }
    assert!(
        node.replica.group(&busy).is_some(),
        "pinned by its open position"
    );
    assert!(node.replica.loaded_groups() <= CACHE + 1);
    assert!(node.replica.evictions() >= 5);
    // Only the group whose state was persisted is in the registry.
    assert_eq!(
        list_groups(&node.store, None, 100).unwrap(),
        vec![busy.clone()]
    );
    // Once finished it may leave like any other.
    assert!(matches!(
        node.ask(mark(&busy, 1, 1)),
        ReplicaReply::MarkedVisible { .. }
    ));
    for i in 1..4 {
        node.ask(ReplicaRequest::LogState {
            id: 4,
            eg: group(i),
        });
    }
    assert!(
        node.replica.group(&busy).is_none(),
        "evicted once quiescent"
    );
}
