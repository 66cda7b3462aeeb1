//! The test driver shared by the coordinator tests: a coordinator taken through its
//! lock session, and the requests readers and writers send it.

#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, CoordinatorReply, CoordinatorRequest, Input,
    Output,
};
use megastore_lock::{LockCommand, LockError, LockReply, LockResponse, Sequencer, SessionId};
use megastore_types::{ClientId, EgId, Epoch, LockNodeId, NodeId, Position, ReplicaId, Time};

pub(crate) const LEASE: Duration = Duration::from_secs(10);
pub(crate) const READER: NodeId = NodeId::Client(ClientId(7));

pub(crate) fn config(bugs: CoordinatorBugs) -> CoordinatorConfig {
    CoordinatorConfig {
        replica: ReplicaId(1),
        lock_nodes: vec![LockNodeId(0)],
        lock_attempt_timeout: Duration::from_secs(1),
        keepalive_interval: Duration::from_secs(3),
        max_clock_drift_ppm: 1_000,
        lease_margin: Duration::from_millis(100),
        retry_delay: Duration::from_secs(1),
        // Request ids wrap around from here.
        first_request_id: u64::MAX,
        valid_max: 1_000,
        invalid_max: 1_000,
        bugs,
    }
}

pub(crate) fn eg() -> EgId {
    EgId(b"user/1".to_vec())
}

pub(crate) fn t(seconds: f64) -> Time {
    Time::ZERO + Duration::from_secs_f64(seconds)
}

/// The one lock request in `out`: its id and command.
pub(crate) fn lock_request(out: &[Output]) -> (u64, LockCommand) {
    let sends: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Lock(send) => Some((send.request.id, send.request.command.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 1, "expected one lock request in {out:?}");
    sends[0].clone()
}

pub(crate) fn respond(
    c: &mut Coordinator,
    now: Time,
    id: u64,
    result: Result<LockReply, LockError>,
) -> Vec<Output> {
    c.step(
        now,
        Input::Lock {
            from: LockNodeId(0),
            response: LockResponse { id, result },
        },
    )
}

/// A coordinator that opened session 5 at 0 s and holds its lock with sequencer 42.
pub(crate) fn serving(bugs: CoordinatorBugs) -> Coordinator {
    start_serving(Coordinator::new(config(bugs)), "coordinator/1")
}

/// `c`, started: it opened session 5 at 0 s and holds its lock, `lock`, with sequencer
/// 42.
pub(crate) fn start_serving(c: Coordinator, lock: &str) -> Coordinator {
    let (mut c, out) = take_lock(c, lock);
    if c.placement().is_some() {
        // A placed coordinator reads the placement after taking its lock; none stored
        // means the one it was placed by is the newest.
        let (id, command) = lock_request(&out);
        assert!(
            matches!(command, LockCommand::ReadFile { .. }),
            "{command:?}"
        );
        respond(&mut c, t(0.25), id, Ok(LockReply::File(None)));
    }
    c
}

/// `c`, started up to holding its lock `lock` (session 5, sequencer 42); what it did
/// on taking it.
pub(crate) fn take_lock(mut c: Coordinator, lock: &str) -> (Coordinator, Vec<Output>) {
    let out = c.step(t(0.0), Input::Start);
    let (id, command) = lock_request(&out);
    assert_eq!(command, LockCommand::OpenSession { owner: lock.into() });
    let out = respond(
        &mut c,
        t(0.1),
        id,
        Ok(LockReply::Session {
            session: SessionId(5),
            lease: LEASE,
        }),
    );
    let (id, command) = lock_request(&out);
    assert_eq!(
        command,
        LockCommand::Acquire {
            session: SessionId(5),
            lock: lock.into()
        }
    );
    let out = respond(
        &mut c,
        t(0.2),
        id,
        Ok(LockReply::Acquired {
            sequencer: Sequencer(42),
        }),
    );
    assert_eq!(c.epoch(), Some(Epoch(42)));
    (c, out)
}

pub(crate) fn query(c: &mut Coordinator, now: Time) -> (bool, Option<Epoch>) {
    let out = c.step(
        now,
        Input::Request {
            from: READER,
            request: CoordinatorRequest::Query { id: 1, eg: eg() },
        },
    );
    match &out[0] {
        Output::Reply {
            to,
            reply:
                CoordinatorReply::Query {
                    id: 1,
                    vouched,
                    epoch,
                    ..
                },
        } if *to == READER => (*vouched, *epoch),
        other => panic!("expected a query reply, got {other:?}"),
    }
}

pub(crate) fn validate(c: &mut Coordinator, now: Time, position: u64, epoch: u64) {
    let request = CoordinatorRequest::Validate {
        eg: eg(),
        position: Position(position),
        epoch: Epoch(epoch),
    };
    let out = c.step(
        now,
        Input::Request {
            from: READER,
            request,
        },
    );
    assert!(
        out.iter().all(|o| matches!(o, Output::WakeAt(_))),
        "validates are not acknowledged: {out:?}"
    );
}

pub(crate) fn invalidate(c: &mut Coordinator, now: Time, position: u64) {
    let request = CoordinatorRequest::Invalidate {
        id: 9,
        eg: eg(),
        position: Position(position),
    };
    let out = c.step(
        now,
        Input::Request {
            from: NodeId::Client(ClientId(8)),
            request,
        },
    );
    assert_eq!(
        out[0],
        Output::Reply {
            to: NodeId::Client(ClientId(8)),
            reply: CoordinatorReply::Invalidated { id: 9 }
        }
    );
}
