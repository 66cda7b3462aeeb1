//! The test driver shared by the replica tests: a replica over an in-memory store
//! with every output carried out at once, and builders for requests and entries.

#![allow(dead_code)] // each test file uses its own subset

use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    Batch, CellWrite, LogEntry, Message, ProtocolBugs, Replica, ReplicaConfig, ReplicaInput,
    ReplicaReply, ReplicaRequest, RowWrite,
};
use megastore_rowstore::MemoryStore;
use megastore_types::{
    Ballot, ClientId, EgId, NodeId, Position, ProposerId, ReplicaId, ReplicaInfo, ReplicaKind,
    SiteId, Time, Topology, TxnId,
};

pub(crate) const CLIENT: NodeId = NodeId::Client(ClientId(1));

pub(crate) fn topology() -> Topology {
    let r = |id, kind| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(id),
    };
    Topology::new(vec![
        r(1, ReplicaKind::Full),
        r(2, ReplicaKind::Full),
        r(3, ReplicaKind::Witness),
        r(4, ReplicaKind::ReadOnly),
    ])
    .unwrap()
}

/// A client core at site 1 of `topology`, with short timeouts.
pub(crate) fn client_core(topology: Topology) -> megastore_paxos::ClientCore {
    client_core_relaying(topology, false)
}

/// A client core at site 1 of `topology`, with short timeouts, relaying hot groups'
/// commits or not.
pub(crate) fn client_core_relaying(
    topology: Topology,
    relay_hot_groups: bool,
) -> megastore_paxos::ClientCore {
    client_core_with(topology, relay_hot_groups, ProtocolBugs::NONE)
}

/// A client core at site 1 of `topology`, with short timeouts, in relay role `role`.
pub(crate) fn client_core_in_role(
    topology: Topology,
    role: megastore_paxos::RelayRole,
) -> megastore_paxos::ClientCore {
    client_core_in_role_with(topology, role, ProtocolBugs::NONE)
}

/// [`client_core_relaying`] with protocol mistakes `bugs`.
pub(crate) fn client_core_with(
    topology: Topology,
    relay_hot_groups: bool,
    bugs: ProtocolBugs,
) -> megastore_paxos::ClientCore {
    let role = if relay_hot_groups {
        megastore_paxos::RelayRole::Writer
    } else {
        megastore_paxos::RelayRole::Direct
    };
    client_core_in_role_with(topology, role, bugs)
}

/// [`client_core_in_role`] with protocol mistakes `bugs`.
pub(crate) fn client_core_in_role_with(
    topology: Topology,
    relay_role: megastore_paxos::RelayRole,
    bugs: ProtocolBugs,
) -> megastore_paxos::ClientCore {
    let ms = std::time::Duration::from_millis;
    megastore_paxos::ClientCore::new(megastore_paxos::ClientConfig {
        id: ClientId(1),
        site: SiteId(1),
        proposer: megastore_paxos::ProposerConfig {
            topology,
            proposer: ProposerId(1 << 32 | 1),
            lock_nodes: vec![megastore_types::LockNodeId(0)],
            timeouts: megastore_paxos::Timeouts {
                leader: ms(50),
                invalidate: ms(100),
                backoff: ms(20),
                ..megastore_paxos::Timeouts::from_rpc_and_lease(ms(100), ms(1000))
            },
            bugs,
        },
        seed: 7,
        delivery_batch: megastore_paxos::queue::DELIVERY_BATCH,
        wall_clock_offset_ms: 0,
        relay_role,
    })
}

/// A scripted voter's answer to an accept (`id`) at `position`, where another
/// client's (2) entry is already chosen and visible, naming `next_leader`.
pub(crate) fn chosen_by_another_client(
    id: u64,
    position: Position,
    next_leader: ReplicaId,
) -> ReplicaReply {
    chosen_by_another_client_writing(id, position, next_leader, row_writes())
}

/// [`chosen_by_another_client`], its entry writing `writes`.
pub(crate) fn chosen_by_another_client_writing(
    id: u64,
    position: Position,
    next_leader: ReplicaId,
    writes: Vec<RowWrite>,
) -> ReplicaReply {
    let ballot = Ballot {
        round: 1,
        proposer: ProposerId::client(ClientId(2)),
    };
    let txn = TxnId {
        client: ClientId(2),
        seq: position.0,
    };
    let entry = LogEntry::combining([(txn, writes)], Some(next_leader));
    ReplicaReply::Accept {
        id,
        result: AcceptResult::Visible(ballot, entry),
    }
}

/// How a client operation driven against scripted replicas ended.
#[derive(Debug)]
pub(crate) enum Driven {
    /// Its result.
    Done(megastore_paxos::OpResult),
    /// The client relayed a commit instead: to this replica, under this request id.
    Relayed(ReplicaId, u64, Box<megastore_paxos::RelayedCommit>),
}

/// Carries a client's `outputs` out against scripted replicas until operation `op` is
/// done or the client relays a commit: each request to a replica is answered by
/// `answer` (or not, `None`), a millisecond later, and the client ticks each round.
pub(crate) fn drive_scripted(
    client: &mut megastore_paxos::ClientCore,
    now: &mut Time,
    op: megastore_paxos::OpId,
    mut outputs: Vec<megastore_paxos::ClientOutput>,
    mut answer: impl FnMut(&ReplicaRequest) -> Option<ReplicaReply>,
) -> Driven {
    use megastore_paxos::{ClientInput, ClientOutput};
    for _ in 0..1_000 {
        let mut replies = Vec::new();
        for output in outputs.drain(..) {
            match output {
                ClientOutput::Send {
                    to: NodeId::Replica(r),
                    message: Message::ReplicaRequest(request),
                } => replies.extend(answer(&request).map(|reply| (r, reply))),
                ClientOutput::Send {
                    to: NodeId::Replica(r),
                    message: Message::Relay { id, commit },
                } => return Driven::Relayed(r, id, commit),
                ClientOutput::Done { op: done, result } if done == op => {
                    return Driven::Done(result);
                }
                _ => {}
            }
        }
        *now = *now + std::time::Duration::from_millis(1);
        for (from, reply) in replies {
            outputs.extend(client.step(
                *now,
                ClientInput::Message {
                    from: NodeId::Replica(from),
                    message: Message::ReplicaReply(reply),
                },
            ));
        }
        outputs.extend(client.step(*now, ClientInput::Tick));
    }
    panic!("operation {op:?} did not end");
}

pub(crate) fn eg() -> EgId {
    EgId(b"g1".to_vec())
}

/// A replica and its store, with every output carried out at once.
pub(crate) struct Node {
    pub(crate) id: ReplicaId,
    pub(crate) bugs: ProtocolBugs,
    pub(crate) rejoining: bool,
    pub(crate) cache_groups: Option<usize>,
    pub(crate) replica: Replica,
    pub(crate) store: MemoryStore,
}

impl Node {
    pub(crate) fn new(id: u16) -> Self {
        Self::with_bugs(id, ProtocolBugs::NONE)
    }

    pub(crate) fn with_bugs(id: u16, bugs: ProtocolBugs) -> Self {
        Self::build(id, bugs, false)
    }

    /// A replica that lost its store (no sweep: it is never cleared by itself).
    pub(crate) fn rejoining(id: u16) -> Self {
        Self::build(id, ProtocolBugs::NONE, true)
    }

    fn build(id: u16, bugs: ProtocolBugs, rejoining: bool) -> Self {
        Node {
            id: ReplicaId(id),
            bugs,
            rejoining,
            cache_groups: None,
            replica: Replica::new(Self::config(ReplicaId(id), bugs, rejoining, None)),
            store: MemoryStore::new(),
        }
    }

    /// A replica with a bounded group cache (so an open index), started over `store`:
    /// a server whose store may already hold state.
    pub(crate) fn cached_over(id: u16, cache_groups: usize, store: MemoryStore) -> Self {
        let config = Self::config(ReplicaId(id), ProtocolBugs::NONE, false, Some(cache_groups));
        Node {
            id: ReplicaId(id),
            bugs: ProtocolBugs::NONE,
            rejoining: false,
            cache_groups: Some(cache_groups),
            replica: Replica::new(config),
            store,
        }
    }

    /// A replica placed on a server (`placement`), with a bounded group cache, over
    /// `store`.
    pub(crate) fn placed_over(
        id: u16,
        placement: megastore_placement::ServerPlacement,
        store: MemoryStore,
        bugs: ProtocolBugs,
    ) -> Self {
        let config = Self::config(ReplicaId(id), bugs, false, Some(8));
        Node {
            id: ReplicaId(id),
            bugs,
            rejoining: false,
            cache_groups: Some(8),
            replica: Replica::new(config).placed(placement),
            store,
        }
    }

    fn config(
        id: ReplicaId,
        bugs: ProtocolBugs,
        rejoining: bool,
        cache_groups: Option<usize>,
    ) -> ReplicaConfig {
        ReplicaConfig {
            id,
            topology: topology(),
            bugs,
            sweep: None,
            rejoining,
            cache_groups,
        }
    }

    /// Sends one request; returns the reply (through the driver loop every host runs:
    /// the reply leaves once the batch's writes are synced).
    pub(crate) fn ask(&mut self, request: ReplicaRequest) -> ReplicaReply {
        let input = ReplicaInput::Message {
            from: CLIENT,
            message: Message::ReplicaRequest(request),
        };
        let (mut replies, _) = self.step_at(Time::ZERO, input);
        assert_eq!(replies.len(), 1, "{replies:?}");
        replies.pop().unwrap()
    }

    /// Sends one request; returns every reply the step released: none for a request it
    /// holds (a long poll), and also the answers to held ones it released.
    pub(crate) fn ask_all(&mut self, request: ReplicaRequest) -> Vec<ReplicaReply> {
        let input = ReplicaInput::Message {
            from: CLIENT,
            message: Message::ReplicaRequest(request),
        };
        self.step_at(Time::ZERO, input).0
    }

    /// Steps `input` at `now`; every reply it released, and when it wants its next tick.
    pub(crate) fn step_at(
        &mut self,
        now: Time,
        input: ReplicaInput,
    ) -> (Vec<ReplicaReply>, Option<Time>) {
        let mut batch = Batch::new();
        self.replica
            .step_into(now, input, &self.store, &mut batch)
            .unwrap();
        let released = batch.release(&self.store).unwrap();
        let replies = released
            .sends
            .into_iter()
            // Replies to the host's own requests (loading open groups) go nowhere.
            .filter(|(to, _)| *to != NodeId::Client(megastore_paxos::DRIVER_CLIENT))
            .filter_map(|(_, message)| match message {
                Message::ReplicaReply(reply) => Some(reply),
                _ => None,
            })
            .collect();
        (replies, released.wake)
    }

    /// A crash: unsynced writes are lost and the replica restarts from its store.
    pub(crate) fn restart(&mut self) {
        self.store.crash();
        self.replica = Replica::new(Self::config(
            self.id,
            self.bugs,
            self.rejoining,
            self.cache_groups,
        ));
    }
}

/// A transaction's writes for a commit: row `k` of the test group, `v = "x"`.
pub(crate) fn row_writes() -> Vec<RowWrite> {
    vec![RowWrite {
        row: [&eg().0[..], b"\x01k"].concat(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    }]
}

pub(crate) fn write(txn: u64, next_leader: Option<u16>, value: &str) -> LogEntry {
    let row = [eg().0, b"\x01k".to_vec()].concat();
    let cells = vec![CellWrite::Set {
        column: b"v".to_vec(),
        value: value.as_bytes().to_vec(),
    }];
    LogEntry {
        txn: Some(TxnId {
            client: ClientId(1),
            seq: txn,
        }),
        next_leader: next_leader.map(ReplicaId),
        writes: vec![RowWrite { row, cells }],
        ..LogEntry::noop()
    }
}

pub(crate) fn ballot(round: u64) -> Ballot {
    Ballot {
        round,
        proposer: ProposerId::client(ClientId(1)),
    }
}

pub(crate) fn accept(p: u64, b: Ballot, entry: LogEntry, grant: bool) -> ReplicaRequest {
    ReplicaRequest::Accept {
        id: 1,
        eg: eg(),
        position: Position(p),
        ballot: b,
        entry,
        grant,
        previous_visible: None,
        voters_at: megastore_placement::Version(0),
    }
}

pub(crate) fn mark(p: u64, b: Ballot, entry: LogEntry) -> ReplicaRequest {
    ReplicaRequest::MarkVisible {
        id: 2,
        eg: eg(),
        position: Position(p),
        ballot: b,
        entry,
    }
}

pub(crate) fn accept_result(reply: ReplicaReply) -> AcceptResult {
    match reply {
        ReplicaReply::Accept { result, .. } => result,
        other => panic!("not an accept reply: {other:?}"),
    }
}

/// Position 1 chosen with `next_leader` = 1 and marked visible at `node`.
pub(crate) fn with_visible_first_entry(node: &mut Node) {
    with_visible_first(node, write(1, Some(1), "one"));
}

/// Position 1 chosen as `first` and marked visible (so applied) at `node`.
pub(crate) fn with_visible_first(node: &mut Node, first: LogEntry) {
    assert_eq!(
        accept_result(node.ask(accept(1, ballot(1), first.clone(), false))),
        AcceptResult::Accepted
    );
    assert!(matches!(
        node.ask(mark(1, ballot(1), first)),
        ReplicaReply::MarkedVisible {
            applied: Position(1),
            ..
        }
    ));
}

/// A server per replica of [`topology`] (`ServerId` = the replica's id, at its site),
/// and a second one at site 2, server 22: where replica 2's slot can move.
pub(crate) fn servers_22_beside_2() -> Vec<megastore_placement::Server> {
    [(1, 1), (2, 2), (22, 2), (3, 3), (4, 4)]
        .into_iter()
        .map(|(id, site)| megastore_placement::Server {
            id: megastore_placement::ServerId(id),
            site: SiteId(site),
        })
        .collect()
}

/// Two servers at site 1 (0 and 1, where replica 1's slots can move), one at each
/// other site.
pub(crate) fn servers_0_and_1_at_site_1() -> Vec<megastore_placement::Server> {
    [(0, 1), (1, 1), (10, 2), (20, 3), (30, 4)]
        .into_iter()
        .map(|(id, site)| megastore_placement::Server {
            id: megastore_placement::ServerId(id),
            site: SiteId(site),
        })
        .collect()
}

/// Replica 1's core on `server`, as it starts: from the placement it stored (if any),
/// then fed `view`, the newest it reads.
pub(crate) fn replica_on(
    server: megastore_placement::ServerId,
    view: &megastore_placement::Placement,
    store: MemoryStore,
    bugs: ProtocolBugs,
) -> Node {
    use megastore_placement::{PlacementBugs, ServerPlacement};
    let placement = megastore_paxos::load_server_placement(&store, server, PlacementBugs::NONE)
        .unwrap()
        .unwrap_or_else(|| {
            let frozen = std::collections::BTreeMap::new();
            ServerPlacement::new(server, view.clone(), frozen, PlacementBugs::NONE).0
        });
    let mut node = Node::placed_over(1, placement, store, bugs);
    node.step_at(Time::ZERO, ReplicaInput::Placement(view.clone()));
    node
}

/// The placement reads (lock service reads of the placement file) among a client's
/// `outputs`: where each goes, and its lock request id.
pub(crate) fn placement_reads(outputs: &[megastore_paxos::ClientOutput]) -> Vec<(NodeId, u64)> {
    use megastore_lock::LockCommand;
    outputs
        .iter()
        .filter_map(|output| match output {
            megastore_paxos::ClientOutput::Send {
                to,
                message: Message::LockRequest(request),
            } if request.command
                == (LockCommand::ReadFile {
                    name: megastore_placement::PLACEMENT_FILE.into(),
                }) =>
            {
                Some((*to, request.id))
            }
            _ => None,
        })
        .collect()
}

/// The lock service answers placement read `(from, id)` with `stored`; what the
/// client then does.
pub(crate) fn answer_placement_read(
    client: &mut megastore_paxos::ClientCore,
    now: Time,
    (from, id): (NodeId, u64),
    stored: &megastore_placement::Placement,
) -> Vec<megastore_paxos::ClientOutput> {
    use megastore_lock::{LockFile, LockReply, LockResponse};
    client.step(
        now,
        megastore_paxos::ClientInput::Message {
            from,
            message: Message::LockResponse(LockResponse {
                id,
                result: Ok(LockReply::File(Some(LockFile {
                    version: 1,
                    contents: stored.encode(),
                }))),
            }),
        },
    )
}

/// Positions a group's log holds in the scripted tests before the sweep truncates
/// past a replica that does not answer.
pub(crate) const OUTAGE_LOG_MAX: u64 = 40;

/// The sweep of replica 1 in the scripted tests: a sweep a second, 100 ms RPCs, a
/// one-second lease, 8 positions of data history and no log kept for watchers; a
/// group is probed out of its turn once its log holds more than `probe_above`
/// visible positions above its truncation point.
pub(crate) fn sweep_of_replica_1(probe_above: u64) -> megastore_paxos::SweepConfig {
    let ms = std::time::Duration::from_millis;
    megastore_paxos::SweepConfig {
        interval: ms(1000),
        proposer: megastore_paxos::ProposerConfig {
            topology: topology(),
            proposer: ProposerId::replica(ReplicaId(1)),
            lock_nodes: vec![megastore_types::LockNodeId(0)],
            timeouts: megastore_paxos::Timeouts::from_rpc_and_lease(ms(100), ms(1000)),
            bugs: ProtocolBugs::NONE,
        },
        seed: 3,
        history_kept: 8,
        log_kept: 0,
        probe_above,
        outage_log_max: OUTAGE_LOG_MAX,
    }
}
