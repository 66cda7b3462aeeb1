//! A reply that no operation waits for — a visible mark's acknowledgement after its
//! commit ended, an answer after its operation gave up — changes nothing at a client:
//! its step returns no outputs, without looking at every operation and lane
//! (`ClientCore::step`), and the wake asked for before still stands. A refusal that no
//! operation waits for is still read: it may say the client's placement is behind
//! (placed_routes.rs).

mod support;

use std::time::Duration;

use megastore_paxos::{
    ClientCore, ClientInput, ClientOutput, DataQuery, Message, ReadMode, ReplicaReply,
    ReplicaRequest,
};
use megastore_types::{NodeId, Position, ReplicaId, Time};

fn wake(outputs: &[ClientOutput]) -> Option<Time> {
    outputs.iter().find_map(|o| match o {
        ClientOutput::WakeAt(at) => Some(*at),
        _ => None,
    })
}

fn request_ids(outputs: &[ClientOutput]) -> Vec<u64> {
    outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                message: Message::ReplicaRequest(request),
                ..
            } => Some(request.id()),
            _ => None,
        })
        .collect()
}

/// A client with a snapshot read in flight, started at the time returned, and what the
/// start asked for.
fn read_in_flight() -> (ClientCore, Time, Vec<ClientOutput>) {
    let mut core = support::client_core(support::topology());
    let t0 = Time::ZERO + Duration::from_secs(1);
    let (_, started) = core.read(
        t0,
        support::eg(),
        ReadMode::Snapshot,
        DataQuery::Rows(Vec::new()),
    );
    (core, t0, started)
}

#[test]
fn an_acknowledgement_nobody_waits_for_returns_nothing_and_the_wake_still_stands() {
    let (mut core, t0, started) = read_in_flight();
    let deadline = wake(&started).expect("a read in flight asks to be woken");
    let asked = request_ids(&started);
    let in_flight = core.in_flight();

    // An id no operation holds: none of the read's requests.
    let stray = (1..).find(|id| !asked.contains(id)).expect("a free id");
    let acknowledgement = ClientInput::Message {
        from: NodeId::Replica(ReplicaId(4)),
        message: Message::ReplicaReply(ReplicaReply::MarkedVisible {
            id: stray,
            applied: Position(3),
        }),
    };
    let outputs = core.step(t0 + Duration::from_millis(1), acknowledgement);
    assert!(
        outputs.is_empty(),
        "an acknowledgement nobody waits for changes nothing: {outputs:?}"
    );

    // The read is still in flight, and its deadline is still the one to wake at: the
    // tick there moves it on.
    assert_eq!(core.in_flight(), in_flight);
    let at_deadline = core.step(deadline, ClientInput::Tick);
    assert!(
        !at_deadline.is_empty(),
        "the read goes on at the wake it asked for"
    );
}

/// The request ids are the core's own: a reply to one of them is still handled.
#[test]
fn a_reply_an_operation_waits_for_is_still_handled() {
    let (mut core, t0, started) = read_in_flight();
    let (to, id) = started
        .iter()
        .find_map(|o| match o {
            ClientOutput::Send {
                to,
                message: Message::ReplicaRequest(ReplicaRequest::Read { id, .. }),
            } => Some((*to, *id)),
            _ => None,
        })
        .expect("the read asks a replica");
    // An answer to the read's own request reaches the read (one of the wrong kind
    // here: what matters is that the step looks at it).
    let outputs = core.step(
        t0 + Duration::from_millis(1),
        ClientInput::Message {
            from: to,
            message: Message::ReplicaReply(ReplicaReply::MarkedVisible {
                id,
                applied: Position(3),
            }),
        },
    );
    assert!(
        !outputs.is_empty(),
        "a reply routed to an operation is looked at"
    );
}
