//! The coordinator's rules (docs/protocol.md; paper §4.7.2), event by event.

mod support;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorRequest, GroupState, Input, Output,
};
use megastore_lock::{LockCommand, LockError, LockReply, Sequencer, SessionId};
use megastore_types::{EgId, Epoch, Position, Time};

use support::*;

#[test]
fn nothing_is_vouched_until_a_reader_validates_in_the_current_epoch() {
    let mut c = serving(CoordinatorBugs::NONE);
    assert_eq!(query(&mut c, t(1.0)), (false, Some(Epoch(42))));
    validate(&mut c, t(1.0), 5, 41);
    assert_eq!(
        query(&mut c, t(1.0)),
        (false, Some(Epoch(42))),
        "a validate from another epoch is ignored"
    );
    validate(&mut c, t(1.0), 5, 42);
    assert_eq!(query(&mut c, t(1.0)), (true, Some(Epoch(42))));
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Valid {
            through: Position(5)
        })
    );
}

/// §4.7.2: a higher-numbered invalidate always trumps a lower-numbered validate.
#[test]
fn an_invalidate_beats_any_validate_for_an_earlier_position() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    invalidate(&mut c, t(1.0), 6);
    assert!(!query(&mut c, t(1.0)).0);
    validate(&mut c, t(1.0), 5, 42);
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Invalid { at: Position(6) }),
        "the late validate at 5 is refused"
    );
    invalidate(&mut c, t(1.0), 4);
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Invalid { at: Position(6) }),
        "invalidates only raise the bar"
    );
    validate(&mut c, t(1.0), 6, 42);
    assert!(query(&mut c, t(1.0)).0);
}

#[test]
fn invalidates_are_recorded_for_unknown_groups_and_without_the_lock() {
    let mut c = Coordinator::new(config(CoordinatorBugs::NONE));
    invalidate(&mut c, t(0.0), 3);
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Invalid { at: Position(3) })
    );
    validate(&mut c, t(0.0), 9, 42);
    assert_eq!(
        c.group(&eg()),
        Some(GroupState::Invalid { at: Position(3) }),
        "no lock: validates are refused"
    );
}

#[test]
fn it_stops_vouching_before_the_lock_service_could_call_the_lease_lapsed() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    // The session was opened by a request sent at 0 s: 10 s lease, minus 2 × 0.1 %
    // drift (20 ms), minus the 100 ms margin.
    assert!(query(&mut c, t(9.879)).0);
    assert!(!query(&mut c, t(9.881)).0);
    assert!(!c.holds_lease(t(9.881)));
}

#[test]
fn a_keepalive_extends_the_lease_from_when_it_was_sent() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    let out = c.step(t(3.1), Input::Tick);
    let (id, command) = lock_request(&out);
    assert_eq!(
        command,
        LockCommand::KeepAlive {
            session: SessionId(5)
        }
    );
    respond(&mut c, t(8.0), id, Ok(LockReply::Renewed { lease: LEASE }));
    assert!(query(&mut c, t(12.9)).0, "3.1 s + 9.88 s");
    assert!(!query(&mut c, t(13.0)).0);
}

#[test]
fn losing_the_session_empties_the_state_and_the_next_epoch_refuses_old_validates() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    lose_session(&mut c);
    assert_eq!((c.epoch(), c.group(&eg())), (None, None));
    reacquire(&mut c);
    assert_eq!(c.epoch(), Some(Epoch(43)));
    validate(&mut c, t(4.6), 5, 42);
    assert_eq!(query(&mut c, t(4.6)), (false, Some(Epoch(43))));
}

/// The keep-alive due at 3.1 s finds session 5 expired.
fn lose_session(c: &mut Coordinator) {
    let (id, _) = lock_request(&c.step(t(3.1), Input::Tick));
    respond(c, t(3.2), id, Err(LockError::SessionExpired(SessionId(5))));
}

/// After the retry delay it opens session 6 and takes the lock again: epoch 43.
fn reacquire(c: &mut Coordinator) {
    let (id, command) = lock_request(&c.step(t(4.3), Input::Tick));
    assert!(matches!(command, LockCommand::OpenSession { .. }));
    let (id, _) = lock_request(&respond(
        c,
        t(4.4),
        id,
        Ok(LockReply::Session {
            session: SessionId(6),
            lease: LEASE,
        }),
    ));
    respond(
        c,
        t(4.5),
        id,
        Ok(LockReply::Acquired {
            sequencer: Sequencer(43),
        }),
    );
}

/// Feeds a revocation to the keep-alive due at 3.1 s; returns the close request.
fn revoke(c: &mut Coordinator) -> (u64, LockCommand) {
    let (id, command) = lock_request(&c.step(t(3.1), Input::Tick));
    assert_eq!(
        command,
        LockCommand::KeepAlive {
            session: SessionId(5)
        }
    );
    let out = respond(c, t(3.2), id, Err(LockError::SessionRevoked(SessionId(5))));
    lock_request(&out)
}

#[test]
fn a_revoked_coordinator_stops_vouching_then_gives_its_lock_back_and_never_returns() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(3.0)).0);
    let (close, command) = revoke(&mut c);
    // The close goes out in the same step that stopped the vouching: by the time the
    // lock service frees the lock, nothing here vouches.
    assert_eq!(
        command,
        LockCommand::CloseSession {
            session: SessionId(5)
        }
    );
    assert_eq!(query(&mut c, t(3.2)), (false, None));
    assert!(!c.released(), "released before the service confirmed");
    respond(&mut c, t(3.3), close, Ok(LockReply::Done));
    assert!(c.released());
    validate(&mut c, t(3.4), 5, 42);
    assert_eq!(query(&mut c, t(3.4)), (false, None));
    let out = c.step(t(30.0), Input::Tick);
    assert!(
        out.iter().all(|o| !matches!(o, Output::Lock(_))),
        "it does not reacquire: {out:?}"
    );
}

#[test]
fn a_failed_close_is_retried_until_the_service_confirms() {
    let mut c = serving(CoordinatorBugs::NONE);
    let (close, _) = revoke(&mut c);
    // Both tries refused (one lock node, two tries each): it fails at the deadline.
    let retry = respond(&mut c, t(3.3), close, Err(LockError::Unavailable));
    assert_eq!(lock_request(&retry).0, close);
    respond(&mut c, t(3.4), close, Err(LockError::Unavailable));
    let out = c.step(t(4.4), Input::Tick);
    assert!(out.contains(&Output::WakeAt(t(5.4))), "{out:?}");
    assert!(!c.released());
    let (again, command) = lock_request(&c.step(t(5.4), Input::Tick));
    assert_eq!(
        command,
        LockCommand::CloseSession {
            session: SessionId(5)
        }
    );
    // Expired meanwhile: the lock is free either way.
    respond(
        &mut c,
        t(4.4),
        again,
        Err(LockError::SessionExpired(SessionId(5))),
    );
    assert!(c.released());
}

#[test]
fn stopping_gives_the_lock_back_after_the_last_vouch() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    let (close, command) = lock_request(&c.step(t(1.5), Input::Stop));
    assert_eq!(
        command,
        LockCommand::CloseSession {
            session: SessionId(5)
        }
    );
    assert_eq!(query(&mut c, t(1.5)), (false, None));
    respond(&mut c, t(1.6), close, Ok(LockReply::Done));
    assert!(c.released());

    // Stopped while its session was being opened: the session is closed when it comes.
    let mut c = Coordinator::new(config(CoordinatorBugs::NONE));
    let (open, _) = lock_request(&c.step(t(0.0), Input::Start));
    assert!(
        c.step(t(0.05), Input::Stop)
            .iter()
            .all(|o| !matches!(o, Output::Lock(_)))
    );
    let out = respond(
        &mut c,
        t(0.1),
        open,
        Ok(LockReply::Session {
            session: SessionId(9),
            lease: LEASE,
        }),
    );
    assert_eq!(
        lock_request(&out).1,
        LockCommand::CloseSession {
            session: SessionId(9)
        }
    );
    assert_eq!(query(&mut c, t(0.2)), (false, None));
}

#[test]
fn a_lock_held_by_an_older_incarnation_is_retried_until_it_lapses() {
    let mut c = Coordinator::new(config(CoordinatorBugs::NONE));
    let (id, _) = lock_request(&c.step(t(0.0), Input::Start));
    let (id, _) = lock_request(&respond(
        &mut c,
        t(0.1),
        id,
        Ok(LockReply::Session {
            session: SessionId(7),
            lease: LEASE,
        }),
    ));
    let holder = megastore_lock::LockHolder {
        session: SessionId(5),
        owner: "coordinator/1".into(),
        sequencer: Sequencer(42),
    };
    let out = respond(&mut c, t(0.2), id, Err(LockError::Held(holder)));
    assert!(out.contains(&Output::WakeAt(t(1.2))), "{out:?}");
    let (_, command) = lock_request(&c.step(t(1.2), Input::Tick));
    assert_eq!(
        command,
        LockCommand::Acquire {
            session: SessionId(7),
            lock: "coordinator/1".into()
        }
    );
}

/// The bug knobs really change behaviour (the simulator relies on it).
#[test]
fn bug_knobs_break_the_rules_they_name() {
    let mut c = serving(CoordinatorBugs {
        validate_ignores_epoch: true,
        ..CoordinatorBugs::NONE
    });
    validate(&mut c, t(1.0), 5, 41);
    assert!(query(&mut c, t(1.0)).0);

    let mut c = serving(CoordinatorBugs {
        validate_ignores_position: true,
        ..CoordinatorBugs::NONE
    });
    invalidate(&mut c, t(1.0), 6);
    validate(&mut c, t(1.0), 5, 42);
    assert!(query(&mut c, t(1.0)).0);

    let mut c = Coordinator::new(config(CoordinatorBugs {
        validate_without_lock: true,
        ..CoordinatorBugs::NONE
    }));
    validate(&mut c, t(0.0), 5, 42);
    assert!(query(&mut c, t(0.0)).0);

    let mut c = serving(CoordinatorBugs {
        release_while_vouching: true,
        ..CoordinatorBugs::NONE
    });
    validate(&mut c, t(1.0), 5, 42);
    let (_, command) = revoke(&mut c);
    assert!(matches!(command, LockCommand::CloseSession { .. }));
    assert!(
        query(&mut c, t(3.3)).0,
        "vouches after giving the lock back"
    );
}

/// docs/protocol.md: every epoch change empties the state. A coordinator whose lock
/// lapsed may have missed invalidations (writers skipped it once the lock service
/// called its lock free), so what it vouched for before must not survive into the
/// epoch of its next lock — with the knob `keep-state-across-epochs` it does.
#[test]
fn a_re_acquired_lock_starts_an_epoch_that_vouches_for_nothing() {
    let run = |bugs: CoordinatorBugs| {
        let mut c = serving(bugs);
        validate(&mut c, t(1.0), 5, 42);
        assert!(query(&mut c, t(1.1)).0, "vouched in epoch 42");
        lose_session(&mut c);
        reacquire(&mut c);
        // Nobody validated the group in epoch 43.
        query(&mut c, t(4.6))
    };
    assert_eq!(run(CoordinatorBugs::NONE), (false, Some(Epoch(43))));
    let broken = CoordinatorBugs {
        keep_state_across_epochs: true,
        ..CoordinatorBugs::NONE
    };
    assert_eq!(
        run(broken),
        (true, Some(Epoch(43))),
        "the knob breaks the rule"
    );
}

/// The lock client retries a request across lock nodes for a while, so an answer can
/// arrive after the coordinator moved on to a new session. An answer about a session
/// it no longer holds says nothing about the current one: it neither loses the lock
/// nor forgets what it vouches for. (Found by a 10,000-seed run: a stale "session
/// expired" sent a serving coordinator back to opening a session while it still held
/// its lock and valid groups.)
#[test]
fn an_answer_about_an_older_session_changes_nothing() {
    let mut c = serving(CoordinatorBugs::NONE);
    validate(&mut c, t(1.0), 5, 42);
    let (id, _) = lock_request(&c.step(t(3.1), Input::Tick));
    respond(
        &mut c,
        t(3.2),
        id,
        Err(LockError::SessionExpired(SessionId(4))),
    );
    assert_eq!(c.epoch(), Some(Epoch(42)));
    assert_eq!(query(&mut c, t(3.3)), (true, Some(Epoch(42))));
}

fn group(n: u8) -> EgId {
    EgId(vec![b'g', n])
}

fn request(c: &mut Coordinator, now: Time, request: CoordinatorRequest) -> Vec<Output> {
    c.step(
        now,
        Input::Request {
            from: READER,
            request,
        },
    )
}

/// A bounded coordinator (issue 20): past `valid_max` it forgets a valid group (its
/// readers then read from a majority), and it never forgets an invalid one: one more
/// than `invalid_max` stops it vouching for every group and starts a new epoch.
#[test]
fn past_its_bounds_it_forgets_valid_groups_and_restarts_its_epoch_for_invalid_ones() {
    let mut bounded = config(CoordinatorBugs::NONE);
    bounded.valid_max = 2;
    bounded.invalid_max = 2;
    let mut c = start_serving(Coordinator::new(bounded.clone()), "coordinator/1");
    let validate = |n| CoordinatorRequest::Validate {
        eg: group(n),
        position: Position(5),
        epoch: Epoch(42),
    };
    let invalidate = |n, p| CoordinatorRequest::Invalidate {
        id: 9,
        eg: group(n),
        position: Position(p),
    };
    for n in 0..5 {
        request(&mut c, t(1.0), validate(n));
    }
    assert_eq!(c.tracked(), (2, 0), "at most two valid groups");
    let vouched: Vec<u8> = (0..5).filter(|n| c.vouches(t(1.0), &group(*n))).collect();
    assert_eq!(vouched.len(), 2, "{vouched:?}");
    // Invalid groups are kept, up to the bound, even over valid ones.
    request(&mut c, t(1.0), invalidate(10, 7));
    request(&mut c, t(1.0), invalidate(11, 7));
    assert_eq!(c.tracked().1, 2);
    request(&mut c, t(1.0), validate(10));
    assert!(
        !c.vouches(t(1.0), &group(10)),
        "an older validate is refused"
    );
    // One more: it stops vouching for all, gives its lock back and takes it anew.
    let out = request(&mut c, t(1.0), invalidate(12, 7));
    let commands: Vec<LockCommand> = out
        .iter()
        .filter_map(|o| match o {
            Output::Lock(send) => Some(send.request.command.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        commands,
        vec![
            LockCommand::CloseSession {
                session: SessionId(5)
            },
            LockCommand::OpenSession {
                owner: "coordinator/1".into()
            },
        ]
    );
    assert_eq!(c.tracked(), (0, 0));
    assert_eq!(c.epoch(), None);
    assert!((0..13).all(|n| !c.vouches(t(1.0), &group(n))));
    // A validate of the old epoch is refused from now on.
    request(&mut c, t(1.1), validate(1));
    assert!(!c.vouches(t(1.1), &group(1)));
    assert_eq!(c.tracked(), (0, 0));
}
