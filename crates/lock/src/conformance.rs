//! The conformance suite every [`LockService`] passes: the in-process service in this
//! crate's tests, and the openraft-backed one in `lockd`'s.
//!
//! Use [`crate::lock_service_conformance_tests!`] with an expression that builds a
//! fresh [`LockHarness`].

use std::time::Duration;

use crate::core::{LEASE_TTL_MAX, LEASE_TTL_MIN, LockError};
use crate::service::{LockService, LockServiceExt};

/// A lock service under test, with control of (or patience for) time.
pub trait LockHarness {
    /// The service type.
    type Service: LockService;
    /// The service.
    fn service(&self) -> &Self::Service;
    /// Lets `duration` pass on the service's clock (a manual clock advances; a real
    /// service is waited for).
    fn advance(&mut self, duration: Duration);
}

/// A session lives one lease without keep-alives, and a keep-alive extends it.
pub fn sessions_live_one_lease_unless_kept_alive<H: LockHarness>(h: &mut H) {
    let (session, lease) = h.service().open_session("a").unwrap();
    h.advance(lease / 2);
    assert_eq!(h.service().keep_alive(session).unwrap(), lease);
    h.advance(lease * 3 / 4);
    h.service()
        .keep_alive(session)
        .expect("extended by the keep-alive");
    h.advance(lease + lease / 4);
    assert_eq!(
        h.service().keep_alive(session),
        Err(LockError::SessionExpired(session))
    );
}

/// A lock has one holder; acquiring again is idempotent; fencing tokens only grow.
pub fn locks_are_exclusive_with_growing_sequencers<H: LockHarness>(h: &mut H) {
    let s = h.service();
    let (a, _) = s.open_session("a").unwrap();
    let (b, _) = s.open_session("b").unwrap();
    let first = s.acquire(a, "coordinator/1").unwrap();
    assert_eq!(
        s.acquire(a, "coordinator/1").unwrap(),
        first,
        "idempotent for the holder"
    );
    match s.acquire(b, "coordinator/1") {
        Err(LockError::Held(holder)) => {
            assert_eq!((holder.session, holder.owner.as_str()), (a, "a"))
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let holder = s.holder("coordinator/1").unwrap().unwrap();
    assert_eq!((holder.session, holder.sequencer), (a, first));
    assert_eq!(s.release(b, "coordinator/1"), Err(LockError::NotHolder));
    s.release(a, "coordinator/1").unwrap();
    assert_eq!(s.holder("coordinator/1").unwrap(), None);
    let second = s.acquire(b, "coordinator/1").unwrap();
    assert!(second > first, "{second:?} > {first:?}");
    assert!(s.acquire(a, "other").unwrap() > second);
}

/// A lock lapses with its session's lease, and the next holder gets a higher token.
pub fn locks_lapse_with_their_session<H: LockHarness>(h: &mut H) {
    let (a, lease) = h.service().open_session("a").unwrap();
    let first = h.service().acquire(a, "l").unwrap();
    h.advance(lease + lease / 4);
    assert_eq!(h.service().holder("l").unwrap(), None);
    assert_eq!(
        h.service().acquire(a, "l"),
        Err(LockError::SessionExpired(a))
    );
    let (b, _) = h.service().open_session("b").unwrap();
    assert!(h.service().acquire(b, "l").unwrap() > first);
}

/// Revoking a holder stops renewals; its lock lapses when the current lease ends, not
/// before (the holder may still be acting on it until then).
pub fn revoked_holders_lapse_at_their_lease_end<H: LockHarness>(h: &mut H) {
    let (a, lease) = h.service().open_session("coordinator-a").unwrap();
    h.service().acquire(a, "coordinator/1").unwrap();
    assert!(h.service().revoke_holder("coordinator/1").unwrap());
    assert_eq!(h.service().keep_alive(a), Err(LockError::SessionRevoked(a)));
    h.advance(lease / 4);
    assert!(
        h.service().holder("coordinator/1").unwrap().is_some(),
        "still within its lease"
    );
    h.advance(lease);
    assert_eq!(h.service().holder("coordinator/1").unwrap(), None);
    assert!(
        !h.service().revoke_holder("coordinator/1").unwrap(),
        "nothing left to revoke"
    );
}

/// A revoked holder that closes its session (it stopped acting on the lock) frees the
/// lock at once: `coordinator disable` ends a write stall without waiting out the lease.
pub fn a_revoked_holder_gives_its_lock_back_by_closing<H: LockHarness>(h: &mut H) {
    let s = h.service();
    let (a, _) = s.open_session("coordinator-a").unwrap();
    s.acquire(a, "coordinator/1").unwrap();
    assert!(s.revoke_holder("coordinator/1").unwrap());
    assert_eq!(s.keep_alive(a), Err(LockError::SessionRevoked(a)));
    s.close_session(a).unwrap();
    assert_eq!(s.holder("coordinator/1").unwrap(), None);
    let (b, _) = s.open_session("coordinator-b").unwrap();
    s.acquire(b, "coordinator/1").unwrap();
}

/// Closing a session releases its locks at once.
pub fn closing_a_session_releases_its_locks<H: LockHarness>(h: &mut H) {
    let s = h.service();
    let (a, _) = s.open_session("a").unwrap();
    s.acquire(a, "x").unwrap();
    s.close_session(a).unwrap();
    assert_eq!(s.holder("x").unwrap(), None);
    assert_eq!(s.keep_alive(a), Err(LockError::SessionExpired(a)));
}

/// Small files are compare-and-set by version; versions never repeat.
pub fn files_are_versioned_compare_and_set<H: LockHarness>(h: &mut H) {
    let s = h.service();
    assert_eq!(s.read_file("catalog").unwrap(), None);
    assert_eq!(s.write_file("catalog", 0, b"v1").unwrap(), 1);
    assert_eq!(
        s.write_file("catalog", 0, b"lost"),
        Err(LockError::VersionMismatch {
            expected: 0,
            current: 1
        })
    );
    assert_eq!(s.write_file("catalog", 1, b"v2").unwrap(), 2);
    let file = s.read_file("catalog").unwrap().unwrap();
    assert_eq!((file.version, file.contents.as_slice()), (2, &b"v2"[..]));
}

/// A granted lease lives its own ttl, not the service's session lease; a ttl outside
/// the bounds is refused, naming them.
pub fn granted_leases_live_their_own_ttl<H: LockHarness>(h: &mut H) {
    let ttl = LEASE_TTL_MIN;
    let (lease, granted) = h.service().grant_lease("worker", ttl).unwrap();
    assert_eq!(granted, ttl);
    let (session, session_lease) = h.service().open_session("other").unwrap();
    assert_ne!(
        session_lease, ttl,
        "the case needs a ttl unlike the session lease"
    );
    let token = h.service().acquire(lease, "jobs/nightly").unwrap();
    h.advance(ttl / 2);
    assert_eq!(h.service().keep_alive(lease).unwrap(), ttl);
    h.advance(ttl + ttl / 2);
    assert_eq!(
        h.service().keep_alive(lease),
        Err(LockError::SessionExpired(lease))
    );
    assert_eq!(h.service().holder("jobs/nightly").unwrap(), None);
    assert!(
        h.service().acquire(session, "jobs/nightly").unwrap() > token,
        "the next holder's fencing token is higher"
    );
    for bad in [LEASE_TTL_MIN / 2, LEASE_TTL_MAX * 2] {
        match h.service().grant_lease("worker", bad) {
            Err(LockError::Invalid(message)) => assert!(message.contains("between"), "{message}"),
            other => panic!("a ttl of {bad:?} was not refused: {other:?}"),
        }
    }
}

/// Keys attached to a lease are listed by prefix while it lives and vanish when it is
/// revoked or expires; revisions only grow, also across a key's death and rebirth.
pub fn leased_keys_vanish_with_their_lease<H: LockHarness>(h: &mut H) {
    let ttl = LEASE_TTL_MIN;
    let (a, _) = h.service().grant_lease("a", ttl).unwrap();
    let (b, _) = h.service().grant_lease("b", ttl * 4).unwrap();
    let s = h.service();
    let first = s.put_leased(a, "app/members/a", b"10.0.0.1").unwrap();
    let b_rev = s.put_leased(b, "app/members/b", b"10.0.0.2").unwrap();
    s.put_leased(b, "app/other", b"x").unwrap();
    assert!(b_rev > first);
    let members = s.list_leased("app/members/").unwrap();
    let names: Vec<_> = members.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["app/members/a", "app/members/b"]);
    assert_eq!(
        (members[0].session, members[0].contents.as_slice()),
        (a, &b"10.0.0.1"[..])
    );
    s.close_session(b).unwrap();
    let names: Vec<_> = s
        .list_leased("app/")
        .unwrap()
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["app/members/a"], "a revoked lease takes its keys");
    h.advance(ttl + ttl / 2);
    assert_eq!(h.service().list_leased("app/").unwrap(), Vec::new());
    assert_eq!(
        h.service().put_leased(a, "app/members/a", b"late"),
        Err(LockError::SessionExpired(a))
    );
    let (c, _) = h.service().grant_lease("c", ttl).unwrap();
    assert!(
        h.service()
            .put_leased(c, "app/members/a", b"again")
            .unwrap()
            > b_rev
    );
}

/// The cluster's own sessions are not leases: the lease commands and applications'
/// names (`app/…`) treat them as expired, and leave them alive.
pub fn the_clusters_sessions_are_not_leases<H: LockHarness>(h: &mut H) {
    let s = h.service();
    let (coordinator, _) = s.open_session("coordinator-a").unwrap();
    let expired = Err(LockError::SessionExpired(coordinator));
    assert_eq!(s.renew_lease(coordinator).map(|_| ()), expired);
    assert_eq!(s.revoke_lease(coordinator), expired);
    assert_eq!(s.acquire(coordinator, "app/lock/x").map(|_| ()), expired);
    assert_eq!(
        s.put_leased(coordinator, "app/key/x", b"").map(|_| ()),
        expired
    );
    s.keep_alive(coordinator).expect("still alive");
    s.acquire(coordinator, "coordinator/1")
        .expect("its own names");
    let (lease, ttl) = s.grant_lease("app", LEASE_TTL_MIN).unwrap();
    assert_eq!(s.renew_lease(lease).unwrap(), ttl);
    s.acquire(lease, "app/lock/x").unwrap();
    s.revoke_lease(lease).unwrap();
    assert_eq!(s.holder("app/lock/x").unwrap(), None);
    assert_eq!(s.renew_lease(lease), Err(LockError::SessionExpired(lease)));
}

/// Expands to one `#[test]` per conformance case, each on a fresh harness.
#[macro_export]
macro_rules! lock_service_conformance_tests {
    ($harness:expr) => {
        $crate::lock_service_conformance_tests!(@cases $harness;
            sessions_live_one_lease_unless_kept_alive,
            locks_are_exclusive_with_growing_sequencers,
            locks_lapse_with_their_session,
            revoked_holders_lapse_at_their_lease_end,
            a_revoked_holder_gives_its_lock_back_by_closing,
            closing_a_session_releases_its_locks,
            files_are_versioned_compare_and_set,
            granted_leases_live_their_own_ttl,
            leased_keys_vanish_with_their_lease,
            the_clusters_sessions_are_not_leases,
        );
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let mut harness = $harness;
                $crate::conformance::$case(&mut harness);
            }
        )*
    };
}
