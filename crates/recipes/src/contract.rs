//! The recipes' contract suite, run on any [`Backend`]: the in-process
//! [`MemoryBackend`](crate::MemoryBackend) in this crate's tests, and a real cluster's
//! entity groups in the end-to-end tests. Expiry is driven by a [`ManualClock`], so the
//! lapse cases take no waiting on either.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{
    Acquired, Action, Backend, Board, Clock, Ledger, NewTask, RecipeError, Resolution, Settled,
    TaskState, concurrent_claim, concurrent_txn,
};

/// A clock the test moves by hand (ms since the epoch).
#[derive(Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at `ms`.
    pub fn at(ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(ms)))
    }

    /// Moves it on by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(
            u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// The clock as a recipe reads it.
    pub fn clock(&self) -> Clock {
        let ms = Arc::clone(&self.0);
        Arc::new(move || ms.load(Ordering::SeqCst))
    }
}

const TTL: Duration = Duration::from_secs(10);

fn task(id: &str, deps: &[&str]) -> NewTask {
    NewTask {
        id: id.to_string(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        payload: format!("payload of {id}").into_bytes(),
    }
}

/// Runs every case, each on the fresh backend `fresh(case)` returns.
pub async fn run_all<B: Backend + 'static>(mut fresh: impl FnMut(&str) -> Arc<B>) {
    concurrent_txn(fresh("concurrent_txn"), "contended", 8)
        .await
        .expect("concurrent_txn: exactly one competitor applies");
    claims_race_to_one_winner(fresh("claims_race")).await;
    a_claim_lives_renews_lapses_and_is_taken_over(fresh("claim_lifecycle")).await;
    dependencies_gate_claims(fresh("dependencies")).await;
    the_ledger_decides_done_uncertain_in_flight_held_grant(fresh("ledger_order")).await;
    a_lapsed_attempt_is_uncertain_until_reconciled(fresh("ledger_lapsed")).await;
    uncertainty_outranks_a_held_resource(fresh("ledger_uncertain")).await;
    foreign_bytes_are_refused(fresh("malformed")).await;
}

/// N claimers race: one wins, the generation moves by one; again after it lapses.
pub async fn claims_race_to_one_winner<B: Backend + 'static>(backend: Arc<B>) {
    let clock = ManualClock::at(1_000_000);
    let board = Board::new(backend).with_clock(clock.clock());
    board.add(&[task("race", &[])]).await.unwrap();
    let first = concurrent_claim(&board, "race", 8, TTL)
        .await
        .expect("one winner");
    assert_eq!(first.generation, 1);
    clock.advance(TTL * 2);
    let second = concurrent_claim(&board, "race", 8, TTL)
        .await
        .expect("one winner after the lapse");
    assert_eq!(
        second.generation, 2,
        "a takeover moves the generation by one"
    );
}

/// Claim, renew, lapse, takeover, release, complete — and every stale token refused.
pub async fn a_claim_lives_renews_lapses_and_is_taken_over<B: Backend + 'static>(backend: Arc<B>) {
    let clock = ManualClock::at(1_000_000);
    let board = Board::new(backend).with_clock(clock.clock());
    board.add(&[task("t", &[])]).await.unwrap();
    assert_eq!(
        board.add(&[task("t", &[])]).await,
        Err(RecipeError::TaskExists("t".into()))
    );
    let a = board.claim("t", "a", TTL).await.unwrap();
    assert!(matches!(
        board.claim("t", "b", TTL).await,
        Err(RecipeError::Held { agent, .. }) if agent == "a"
    ));
    clock.advance(TTL / 2);
    let renewed = board.renew("t", &a.token, TTL).await.unwrap();
    assert_eq!(renewed.until_ms, a.until_ms + TTL.as_millis() as u64 / 2);
    assert_eq!(
        board.renew("t", "not-the-token", TTL).await,
        Err(RecipeError::LeaseLost("t".into()))
    );
    clock.advance(TTL + Duration::from_millis(1));
    let lapsed = board.list().await.unwrap();
    assert_eq!(
        board.renew("t", &a.token, TTL).await,
        Err(RecipeError::LeaseLost("t".into())),
        "renewal is an eligibility check, not a heartbeat"
    );
    assert_eq!(
        board.list().await.unwrap(),
        lapsed,
        "a refused renewal changes nothing"
    );
    let b = board.claim("t", "b", TTL).await.unwrap();
    assert_eq!(b.generation, a.generation + 1);
    assert_ne!(b.token, a.token);
    assert_eq!(
        board.complete("t", &a.token).await,
        Err(RecipeError::LeaseLost("t".into()))
    );
    assert_eq!(
        board.release("t", &a.token).await,
        Err(RecipeError::LeaseLost("t".into()))
    );
    board.release("t", &b.token).await.unwrap();
    let [t] = board.list().await.unwrap().try_into().unwrap();
    assert_eq!((t.state, t.generation), (TaskState::Open, b.generation));
    assert_eq!(
        board.complete("t", &b.token).await,
        Err(RecipeError::LeaseLost("t".into())),
        "a released claim completes nothing"
    );
    let c = board.claim("t", "c", TTL).await.unwrap();
    assert_eq!(c.generation, b.generation + 1);
    board.complete("t", &c.token).await.unwrap();
    assert_eq!(
        board.claim("t", "d", TTL).await,
        Err(RecipeError::TaskDone("t".into()))
    );
    assert_eq!(
        board.claim_any("d", TTL).await.unwrap(),
        None,
        "nothing left to claim"
    );
}

/// A task is claimable once every task it depends on is done (including ones added
/// after it).
pub async fn dependencies_gate_claims<B: Backend + 'static>(backend: Arc<B>) {
    let clock = ManualClock::at(1_000_000);
    let board = Board::new(backend).with_clock(clock.clock());
    board
        .add(&[
            task("build", &[]),
            task("test", &["build"]),
            task("ship", &["test", "docs"]),
        ])
        .await
        .unwrap();
    assert_eq!(
        board.claim("test", "w", TTL).await,
        Err(RecipeError::Blocked {
            id: "test".into(),
            waiting: vec!["build".into()]
        })
    );
    let build = board
        .claim_any("w", TTL)
        .await
        .unwrap()
        .expect("build is claimable");
    assert_eq!(build.task.id, "build");
    board.complete("build", &build.token).await.unwrap();
    let test = board
        .claim_any("w", TTL)
        .await
        .unwrap()
        .expect("test is claimable now");
    assert_eq!(test.task.id, "test");
    board.complete("test", &test.token).await.unwrap();
    assert_eq!(
        board.claim("ship", "w", TTL).await,
        Err(RecipeError::Blocked {
            id: "ship".into(),
            waiting: vec!["docs".into()]
        }),
        "a dependency not added yet is waited for"
    );
    board.add(&[task("docs", &[])]).await.unwrap();
    let docs = board.claim("docs", "w", TTL).await.unwrap();
    board.complete("docs", &docs.token).await.unwrap();
    board.claim("ship", "w", TTL).await.unwrap();
}

fn action(key: &str, resource: &str) -> Action {
    Action {
        key: key.into(),
        resource: resource.into(),
    }
}

/// The decision order, and completion that keeps its first result.
pub async fn the_ledger_decides_done_uncertain_in_flight_held_grant<B: Backend + 'static>(
    backend: Arc<B>,
) {
    let clock = ManualClock::at(1_000_000);
    let ledger = Ledger::new(backend).with_clock(clock.clock());
    let pay = action("pay/42", "account/7");
    let Acquired::Granted(lease) = ledger.acquire(&pay, TTL).await.unwrap() else {
        panic!("the first attempt is granted");
    };
    assert_eq!(lease.generation, 1);
    assert!(matches!(
        ledger.acquire(&pay, TTL).await.unwrap(),
        Acquired::InFlight { .. }
    ));
    assert!(matches!(
        ledger
            .acquire(&action("pay/43", "account/7"), TTL)
            .await
            .unwrap(),
        Acquired::Contended { .. }
    ));
    let renewed = ledger.renew(&lease, TTL).await.unwrap();
    assert_eq!(
        ledger.complete(&renewed, b"receipt-1").await.unwrap(),
        b"receipt-1"
    );
    assert_eq!(
        ledger.complete(&renewed, b"receipt-2").await.unwrap(),
        b"receipt-1",
        "the first result stays"
    );
    assert_eq!(
        ledger.acquire(&pay, TTL).await.unwrap(),
        Acquired::Done(b"receipt-1".to_vec())
    );
    let Acquired::Granted(next) = ledger
        .acquire(&action("pay/43", "account/7"), TTL)
        .await
        .unwrap()
    else {
        panic!("the resource is free again");
    };
    assert_eq!(next.generation, 2, "the resource's generation grows");
    ledger.abandon(&next).await.unwrap();
    let Acquired::Granted(again) = ledger
        .acquire(&action("pay/43", "account/7"), TTL)
        .await
        .unwrap()
    else {
        panic!("an abandoned action may be done again");
    };
    assert_eq!(again.generation, 3);
    ledger.release(&again).await.unwrap();
    assert_eq!(
        ledger.complete(&again, b"late").await,
        Err(RecipeError::LeaseLost("pay/43".into())),
        "a released lease completes nothing"
    );
}

/// A holder that died mid-effect leaves its action uncertain: never granted again until
/// one reconciler settles it from the downstream system's facts.
pub async fn a_lapsed_attempt_is_uncertain_until_reconciled<B: Backend + 'static>(backend: Arc<B>) {
    let clock = ManualClock::at(1_000_000);
    let ledger = Ledger::new(backend).with_clock(clock.clock());
    let mail = action("mail/welcome/9", "mailbox/9");
    let Acquired::Granted(lease) = ledger.acquire(&mail, TTL).await.unwrap() else {
        panic!("granted");
    };
    assert!(
        matches!(
            ledger
                .resolve_uncertain("mail/welcome/9", &Resolution::NotApplied)
                .await,
            Err(RecipeError::NothingToSettle { .. })
        ),
        "a live attempt is not settled under its holder"
    );
    clock.advance(TTL * 2);
    assert!(matches!(
        ledger.acquire(&mail, TTL).await.unwrap(),
        Acquired::Uncertain { .. }
    ));
    assert_eq!(
        ledger.complete(&lease, b"sent").await,
        Err(RecipeError::LeaseLost("mail/welcome/9".into())),
        "the dead holder's late completion is refused"
    );
    assert_eq!(
        ledger.renew(&lease, TTL).await,
        Err(RecipeError::LeaseLost("mail/welcome/9".into()))
    );
    let claim = ledger.begin_reconcile("mail/welcome/9", TTL).await.unwrap();
    assert!(matches!(
        ledger.begin_reconcile("mail/welcome/9", TTL).await,
        Err(RecipeError::Reconciling { .. })
    ));
    let mut stolen = claim.clone();
    stolen.holder = "someone-else".into();
    assert_eq!(
        ledger
            .resolve_uncertain_owned(&stolen, &Resolution::NotApplied)
            .await,
        Err(RecipeError::LeaseLost("mail/welcome/9".into()))
    );
    assert_eq!(
        ledger
            .resolve_uncertain_owned(&claim, &Resolution::Applied(b"found in outbox".to_vec()))
            .await
            .unwrap(),
        Settled::Done(b"found in outbox".to_vec())
    );
    assert_eq!(
        ledger
            .resolve_uncertain("mail/welcome/9", &Resolution::NotApplied)
            .await
            .unwrap(),
        Settled::Done(b"found in outbox".to_vec()),
        "the first resolution wins"
    );
    assert_eq!(
        ledger.acquire(&mail, TTL).await.unwrap(),
        Acquired::Done(b"found in outbox".to_vec())
    );
}

/// An action marked uncertain is reported so even while its resource is held: a caller
/// told "contended" would retry, and could apply it twice.
pub async fn uncertainty_outranks_a_held_resource<B: Backend + 'static>(backend: Arc<B>) {
    let clock = ManualClock::at(1_000_000);
    let ledger = Ledger::new(backend).with_clock(clock.clock());
    let charge = action("charge/1", "card/1");
    let Acquired::Granted(lease) = ledger.acquire(&charge, TTL).await.unwrap() else {
        panic!("granted");
    };
    ledger
        .mark_uncertain(&lease, "the gateway timed out")
        .await
        .unwrap();
    assert_eq!(
        ledger.acquire(&charge, TTL).await.unwrap(),
        Acquired::Uncertain {
            reason: "the gateway timed out".into()
        }
    );
    assert_eq!(
        ledger
            .resolve_uncertain("charge/1", &Resolution::NotApplied)
            .await
            .unwrap(),
        Settled::Cleared
    );
    assert!(
        matches!(
            ledger.acquire(&charge, TTL).await.unwrap(),
            Acquired::Contended { .. }
        ),
        "marking it uncertain did not free the resource"
    );
    ledger.release(&lease).await.unwrap();
    let Acquired::Granted(retry) = ledger.acquire(&charge, TTL).await.unwrap() else {
        panic!("cleared and free: granted again");
    };
    assert_eq!(retry.generation, lease.generation + 1);
}

/// Bytes the recipes did not write are refused, naming the key.
pub async fn foreign_bytes_are_refused<B: Backend + 'static>(backend: Arc<B>) {
    backend
        .txn(
            &[],
            &[crate::Mutation::Put("task/x".into(), b"not json".to_vec())],
        )
        .await
        .unwrap();
    let board = Board::new(backend);
    assert!(matches!(
        board.claim("x", "w", TTL).await,
        Err(RecipeError::Malformed { key, .. }) if key == "task/x"
    ));
}
