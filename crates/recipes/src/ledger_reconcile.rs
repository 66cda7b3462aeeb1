//! The ledger's settling side: resolving an uncertain action from the downstream
//! system's facts, and claiming the right to reconcile one. Resolution does **not**
//! check a holder's fence: it rests on what the downstream system says happened, not on
//! who holds the resource — reconciliation happens precisely after a holder died.

use std::time::Duration;

use crate::backend::Mutation;
use crate::cas::{Step, cas_loop};
use crate::ledger::{ActRecord, ActState, Ledger, ReconcileClaim, act_key, act_of, ttl_millis};
use crate::records::put;
use crate::{Backend, RecipeError, mint_token};

/// What the downstream system says about an uncertain action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It happened, with this result.
    Applied(Vec<u8>),
    /// It did not happen: it may be done again.
    NotApplied,
}

/// Where a resolved action stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Done, with this result (the first resolution's or completion's).
    Done(Vec<u8>),
    /// Idle again: it may be acquired and done.
    Cleared,
}

/// A reconciler's claim on an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    /// The action's key.
    pub key: String,
    /// The claim's token.
    pub holder: String,
    /// When it lapses (ms since the epoch).
    pub until_ms: u64,
}

/// Whether `act` awaits settling at `now`: uncertain, or an intent whose attempt
/// lapsed. `Err` says why not.
fn unsettled(act: &ActRecord, key: &str, now: u64) -> Result<(), RecipeError> {
    match &act.state {
        ActState::Uncertain { .. } => Ok(()),
        ActState::Intent { until_ms, .. } if *until_ms <= now => Ok(()),
        ActState::Intent { attempt, .. } => Err(RecipeError::NothingToSettle {
            key: key.to_string(),
            why: format!("attempt {attempt} is still in flight"),
        }),
        ActState::Idle => Err(RecipeError::NothingToSettle {
            key: key.to_string(),
            why: "no attempt was recorded".into(),
        }),
        ActState::Done { .. } => Err(RecipeError::NothingToSettle {
            key: key.to_string(),
            why: "it is done".into(),
        }),
    }
}

impl<B: Backend> Ledger<B> {
    /// Settles an uncertain action (or one whose attempt lapsed) from the downstream
    /// system's facts. The first resolution wins: once done, the stored result is
    /// returned.
    pub async fn resolve_uncertain(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Settled, RecipeError> {
        self.resolve(key, resolution, None).await
    }

    /// [`Ledger::resolve_uncertain`] by the holder of a live reconcile claim only
    /// ([`RecipeError::LeaseLost`] otherwise, with nothing changed): the check and the
    /// resolution are one transaction.
    pub async fn resolve_uncertain_owned(
        &self,
        claim: &Reconcile,
        resolution: &Resolution,
    ) -> Result<Settled, RecipeError> {
        self.resolve(&claim.key, resolution, Some(&claim.holder))
            .await
    }

    async fn resolve(
        &self,
        key: &str,
        resolution: &Resolution,
        reconciler: Option<&str>,
    ) -> Result<Settled, RecipeError> {
        cas_loop(&*self.backend, vec![act_key(key)], |snapshot| {
            let now = (self.clock)();
            let act = act_of(snapshot, key)?;
            if let Some(holder) = reconciler {
                let owned = act
                    .reconcile
                    .as_ref()
                    .is_some_and(|c| c.holder == holder && c.until_ms > now);
                if !owned {
                    return Err(RecipeError::LeaseLost(key.to_string()));
                }
            }
            if let ActState::Done { result } = &act.state {
                return Ok(Step::Answer(Settled::Done(result.clone())));
            }
            unsettled(&act, key, now)?;
            Ok(match resolution {
                Resolution::Applied(result) => {
                    let done = ActRecord {
                        state: ActState::Done {
                            result: result.clone(),
                        },
                        reconcile: None,
                    };
                    Step::Write(
                        vec![put(&act_key(key), &done)],
                        Settled::Done(result.clone()),
                    )
                }
                Resolution::NotApplied => {
                    Step::Write(vec![Mutation::Delete(act_key(key))], Settled::Cleared)
                }
            })
        })
        .await
    }

    /// Claims the right to reconcile `key` for `ttl`: at most one live reconciler per
    /// action, and a lapsed claim can be taken over (a dead reconciler does not block
    /// the action for ever).
    pub async fn begin_reconcile(
        &self,
        key: &str,
        ttl: Duration,
    ) -> Result<Reconcile, RecipeError> {
        let ttl = ttl_millis(ttl)?;
        cas_loop(&*self.backend, vec![act_key(key)], |snapshot| {
            let now = (self.clock)();
            let act = act_of(snapshot, key)?;
            unsettled(&act, key, now)?;
            if let Some(claim) = &act.reconcile
                && claim.until_ms > now
            {
                return Err(RecipeError::Reconciling {
                    key: key.to_string(),
                    holder: claim.holder.clone(),
                    until_ms: claim.until_ms,
                });
            }
            let claim = Reconcile {
                key: key.to_string(),
                holder: mint_token(),
                until_ms: now.saturating_add(ttl),
            };
            let claimed = ActRecord {
                reconcile: Some(ReconcileClaim {
                    holder: claim.holder.clone(),
                    until_ms: claim.until_ms,
                }),
                ..act
            };
            Ok(Step::Write(vec![put(&act_key(key), &claimed)], claim))
        })
        .await
    }
}
