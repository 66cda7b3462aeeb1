//! The lock service's quorum model: who answers, and when leadership moves.

use std::time::Duration;

use megastore_lock::{LockCommand, LockCore, LockError, LockReply, LockRequest, QuorumModel};
use megastore_types::{LockNodeId, Time};

fn model() -> QuorumModel {
    QuorumModel::new(
        LockCore::new(Duration::from_secs(1)),
        (0..3).map(LockNodeId),
        LockNodeId(0),
    )
}

fn open(id: u64) -> LockRequest {
    LockRequest {
        id,
        command: LockCommand::OpenSession {
            owner: "test".into(),
        },
    }
}

/// Every node reaches every other, except across `cut` (both ways).
fn linked_except(cut: &[u16]) -> impl Fn(LockNodeId, LockNodeId) -> bool + '_ {
    move |a, b| !(cut.contains(&a.0) ^ cut.contains(&b.0))
}

#[test]
fn only_a_leader_with_a_majority_applies_commands() {
    let mut m = model();
    let now = || Time::ZERO;
    let answer = m
        .serve(LockNodeId(0), now, &open(1), linked_except(&[]))
        .unwrap();
    assert!(
        matches!(answer.result, Ok(LockReply::Session { .. })),
        "{answer:?}"
    );
    let answer = m
        .serve(LockNodeId(1), now, &open(2), linked_except(&[]))
        .unwrap();
    assert_eq!(answer.result, Err(LockError::NotLeader));
    // The leader cut off from both others has no majority.
    let answer = m
        .serve(LockNodeId(0), now, &open(3), linked_except(&[0]))
        .unwrap();
    assert_eq!(answer.result, Err(LockError::Unavailable));
    // A node that is down answers nothing.
    m.set_up(LockNodeId(0), false);
    assert!(
        m.serve(LockNodeId(0), now, &open(4), linked_except(&[]))
            .is_none()
    );
}

#[test]
fn a_leader_without_a_majority_is_replaced_by_the_first_node_with_one() {
    let mut m = model();
    assert_eq!(m.elect(|_| Time::ZERO, linked_except(&[])), None);
    assert_eq!(
        m.elect(|_| Time::ZERO, linked_except(&[0])),
        Some(LockNodeId(1))
    );
    assert_eq!(m.leader(), LockNodeId(1));
    // With every node alone, nobody leads anew.
    m.set_up(LockNodeId(2), false);
    assert_eq!(m.elect(|_| Time::ZERO, linked_except(&[1])), None);
    assert_eq!(m.leader(), LockNodeId(1));
    assert!(!m.has_quorum(LockNodeId(1), linked_except(&[1])));
}

#[test]
fn an_operator_command_goes_through_the_leader_only_with_a_majority() {
    let mut m = model();
    let open = m.execute_at_leader(
        |_| Time::ZERO,
        &LockCommand::OpenSession { owner: "op".into() },
        linked_except(&[]),
    );
    assert!(matches!(open, Ok(LockReply::Session { .. })), "{open:?}");
    let cut = m.execute_at_leader(
        |_| Time::ZERO,
        &LockCommand::OpenSession { owner: "op".into() },
        linked_except(&[0]),
    );
    assert_eq!(cut, Err(LockError::Unavailable));
}
