//! Where a message goes, on a world of many servers per slot (docs/protocol.md,
//! "Placement"). The cores name replicas and coordinators by *slot* — the
//! `ReplicaId` the groups' Paxos logs know — while the network carries messages
//! between *servers*: a replica server, and the coordinator beside it, has the
//! address `NodeId::Replica(ReplicaId(server))` (and `NodeId::Coordinator(…)`), and
//! the world's maps are keyed by it. A slot's home server, `ServerId(slot)`, has the
//! slot's own id for an address, which is every server so far: then nothing here
//! changes a message's way.
//!
//! - A request to replica or coordinator `r` about group `g` goes to the server the
//!   *sender's* placement names for slot `r` of `g`'s range (a client's, or a
//!   replica's routing placement): the host routes by the placement its core judged
//!   by, so the two never disagree. A server that does not hold it refuses
//!   (`WrongServer`, `Frozen`, `NotServed`); routing is never what keeps it safe.
//! - A request that names a server of the slot (a global index scan's: each server
//!   holds its own groups' global rows) goes to that server.
//! - A reply to a server goes back to the server that asked, found by the request's
//!   id; a server at its slot's home address needs no record of it.
//! - The receiving core sees a server by its slot: `NodeId::Replica(r)`.

use megastore_paxos::Message;
use megastore_placement::{Placement, ServerId};
use megastore_types::{NodeId, ReplicaId};

use super::World;

/// The address of replica server `server` (and, as `NodeId::Coordinator`, of the
/// coordinator beside it).
pub(super) fn address(server: ServerId) -> ReplicaId {
    ReplicaId(server.0)
}

/// The server at `address`.
pub(crate) fn server_at(address: ReplicaId) -> ServerId {
    ServerId(address.0)
}

impl World {
    /// Where a message `from` sends to `to` goes: the address of the server (or its
    /// coordinator) that `to` means for it.
    pub(super) fn route(&mut self, from: NodeId, to: NodeId, message: &Message) -> NodeId {
        if let Some(id) = message.reply_id()
            && let Some(asker) = self.asked.remove(&(from, id))
        {
            return asker;
        }
        let routed = self.by_placement(from, to, message).unwrap_or(to);
        // A server away from its slot's home address is answered there.
        if let NodeId::Replica(sender) = from
            && self.replicas.get(&sender).is_some_and(|n| n.slot != sender)
            && let Some(id) = message.request_id()
        {
            self.asked.insert((routed, id), from);
        }
        routed
    }

    /// The server a request to replica or coordinator `to` about a group goes to, by
    /// the sender's placement (`None`: not such a request, or the sender routes by
    /// none: to the slot's home server).
    fn by_placement(&self, from: NodeId, to: NodeId, message: &Message) -> Option<NodeId> {
        let (NodeId::Replica(slot) | NodeId::Coordinator(slot)) = to else {
            return None;
        };
        if let Some(server) = message.named_server() {
            return Some(NodeId::Replica(address(server)));
        }
        let eg = message.routed_group()?;
        let server = self
            .routing_placement(from)?
            .range_of(&eg.0)
            .slot(slot)?
            .server;
        Some(match to {
            NodeId::Coordinator(_) => NodeId::Coordinator(address(server)),
            _ => NodeId::Replica(address(server)),
        })
    }

    /// How a sender appears to the core it reaches: a server by its slot.
    pub(super) fn as_seen(&self, from: NodeId) -> NodeId {
        match from {
            NodeId::Replica(a) => NodeId::Replica(self.replicas.get(&a).map_or(a, |n| n.slot)),
            NodeId::Coordinator(a) => {
                NodeId::Coordinator(self.coordinators.get(&a).map_or(a, |c| c.slot))
            }
            other => other,
        }
    }

    /// The placement `node`'s core routes its requests by, if it is placed and up.
    fn routing_placement(&self, node: NodeId) -> Option<&Placement> {
        match node {
            NodeId::Client(c) => self.clients.get(&c)?.core.placement(),
            NodeId::Replica(a) => self.replicas.get(&a)?.core.as_ref()?.routing_placement(),
            NodeId::Coordinator(_) | NodeId::LockNode(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use megastore_coordinator::CoordinatorRequest;
    use megastore_paxos::{ClientInput, Message, ReplicaReply, ReplicaRequest};
    use megastore_placement::{Placement, RangeId, Server, ServerId};
    use megastore_rowstore::MemoryStore;
    use megastore_types::{ClientId, EgId, NodeId, Position, ReplicaId};

    use super::address;
    use crate::nodes::{Bugs, ReplicaNode};
    use crate::rng::Rng;
    use crate::trace::Trace;
    use crate::world::World;

    /// A quiet world, with a second server for replica 2's slot at address 100, and a
    /// placement (which client 1 reads) that moved slot 2 there.
    fn world_with_a_moved_slot() -> World {
        let config = crate::measure::three_sites(80, &[0]);
        let mut world = World::from_config(config, Rng::new(1), Bugs::default(), Trace::new(false));
        let site = world.replicas[&ReplicaId(2)].site;
        world.replicas.insert(
            address(ServerId(100)),
            ReplicaNode {
                slot: ReplicaId(2),
                core: None,
                store: MemoryStore::new(),
                site,
                rejoining: false,
                wipes: 0,
                starts: 0,
            },
        );
        let mut servers: Vec<Server> = world.placement.servers().cloned().collect();
        servers.push(Server {
            id: ServerId(100),
            site,
        });
        let initial = Placement::initial(servers, &world.config.topology, 1).unwrap();
        let begun = initial
            .begin_move(RangeId(0), ReplicaId(2), ServerId(100))
            .unwrap();
        let id = begun.version();
        let moved = begun
            .record_frozen(RangeId(0), id)
            .and_then(|p| p.finish_move(RangeId(0), id))
            .unwrap();
        world.run_client(ClientId(1), ClientInput::Placement(moved));
        world
    }

    fn eg() -> EgId {
        EgId(b"g".to_vec())
    }

    #[test]
    fn a_clients_request_goes_to_the_server_its_placement_names_for_the_slot() {
        let mut world = world_with_a_moved_slot();
        let client = NodeId::Client(ClientId(1));
        let read = Message::ReplicaRequest(ReplicaRequest::LogState { id: 7, eg: eg() });
        assert_eq!(
            world.route(client, NodeId::Replica(ReplicaId(2)), &read),
            NodeId::Replica(ReplicaId(100))
        );
        // Slot 1 stayed home.
        assert_eq!(
            world.route(client, NodeId::Replica(ReplicaId(1)), &read),
            NodeId::Replica(ReplicaId(1))
        );
        let invalidate = Message::CoordinatorRequest(CoordinatorRequest::Invalidate {
            id: 8,
            eg: eg(),
            position: Position(1),
        });
        assert_eq!(
            world.route(client, NodeId::Coordinator(ReplicaId(2)), &invalidate),
            NodeId::Coordinator(ReplicaId(100))
        );
    }

    #[test]
    fn a_global_scan_goes_to_the_server_it_names() {
        let mut world = world_with_a_moved_slot();
        let client = NodeId::Client(ClientId(1));
        let scan = |server| {
            Message::ReplicaRequest(ReplicaRequest::ScanGlobal {
                id: 10,
                range: megastore_paxos::global_index_range(),
                limit: None,
                reverse: false,
                server,
                routed_by: None,
            })
        };
        for (server, address) in [(ServerId(100), 100), (ServerId(2), 2)] {
            assert_eq!(
                world.route(client, NodeId::Replica(ReplicaId(2)), &scan(Some(server))),
                NodeId::Replica(ReplicaId(address))
            );
        }
        // Naming none: the slot's home server (no group to route by).
        assert_eq!(
            world.route(client, NodeId::Replica(ReplicaId(2)), &scan(None)),
            NodeId::Replica(ReplicaId(2))
        );
    }

    #[test]
    fn a_server_away_from_home_is_seen_as_its_slot_and_answered_at_its_address() {
        let mut world = world_with_a_moved_slot();
        let away = NodeId::Replica(ReplicaId(100));
        assert_eq!(world.as_seen(away), NodeId::Replica(ReplicaId(2)));
        let request = Message::ReplicaRequest(ReplicaRequest::LogState { id: 9, eg: eg() });
        let to = world.route(away, NodeId::Replica(ReplicaId(1)), &request);
        assert_eq!(to, NodeId::Replica(ReplicaId(1)));
        // Replica 1 answers the slot it saw, replica 2; the answer reaches address 100.
        let reply = Message::ReplicaReply(ReplicaReply::Error {
            id: 9,
            error: megastore_paxos::ReplicaError::Rejoining,
        });
        assert_eq!(world.route(to, NodeId::Replica(ReplicaId(2)), &reply), away);
        // Only once.
        assert_eq!(
            world.route(to, NodeId::Replica(ReplicaId(2)), &reply),
            NodeId::Replica(ReplicaId(2))
        );
    }
}
