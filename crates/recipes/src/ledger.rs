//! The side-effect ledger: an external effect (a payment, an email, a call to another
//! system) done at most once per idempotency key, with the doubt a crash leaves made
//! explicit instead of guessed away.
//!
//! Two records per action, two key families:
//! - `act/<key>`, per action: was it done, is its outcome uncertain, is an attempt in
//!   flight (its *intent*, recorded before the effect), is someone reconciling it;
//! - `res/<resource>`, per resource the effect uses: who holds it, and its generation
//!   (a fencing token that moves up with every grant and is never cleared).
//!
//! [`Ledger::acquire`] decides in this order, the one line of the contract that matters
//! most: **done > uncertain > in flight > resource held > grant**. Putting "uncertain"
//! after "resource held" would tell a caller whose effect may have happened to "try
//! later", and the retry would apply it twice. An intent whose attempt lapsed without
//! an outcome is uncertain: the holder may have done the effect and died before
//! recording it (*intents-block*). Only [`Ledger::resolve_uncertain`] (from the
//! downstream system's facts), or the holder's own [`Ledger::abandon`], unblocks it.
//!
//! The holder's proof ([`LedgerLease`]) is checked three ways on every use: its
//! generation is the resource's latest, the resource's holder is the attempt its grant
//! minted, and the lease's resource is the action's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::{Entry, Mutation};
use crate::cas::{Step, cas_loop};
use crate::records::{decode, put};
use crate::{Backend, Clock, RecipeError, mint_token, system_clock};

/// An effect to do once: `key` names it (an idempotency key), `resource` is what doing
/// it holds exclusively (an account, a mailbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The idempotency key.
    pub key: String,
    /// The resource it holds while in flight.
    pub resource: String,
}

/// A granted attempt: the holder's proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerLease {
    /// The action's key.
    pub key: String,
    /// The resource held.
    pub resource: String,
    /// This attempt's token (minted by the grant that committed).
    pub attempt: String,
    /// The resource's generation this grant made: a fencing token.
    pub generation: u64,
    /// When it lapses unless renewed (ms since the epoch).
    pub until_ms: u64,
}

/// What [`Ledger::acquire`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// Done already: its result. Do not do it again.
    Done(Vec<u8>),
    /// It may or may not have happened: reconcile it from the downstream system's
    /// facts ([`Ledger::resolve_uncertain`]) before anything else.
    Uncertain {
        /// Why it is uncertain.
        reason: String,
    },
    /// Another attempt is doing it now, until then unless renewed.
    InFlight {
        /// When that attempt lapses.
        until_ms: u64,
    },
    /// The resource is held by another action's attempt, until then.
    Contended {
        /// When that holder lapses.
        until_ms: u64,
    },
    /// Yours: do the effect, then [`Ledger::complete`] (or [`Ledger::mark_uncertain`],
    /// or [`Ledger::abandon`] if it surely did not happen).
    Granted(LedgerLease),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ActState {
    /// Never attempted, or its last attempt was abandoned or resolved as not applied.
    #[default]
    Idle,
    /// An attempt recorded its intent and may be doing the effect.
    Intent {
        attempt: String,
        resource: String,
        generation: u64,
        until_ms: u64,
    },
    /// Its outcome is unknown.
    Uncertain { attempt: String, reason: String },
    /// Done, with this result.
    Done { result: Vec<u8> },
}

/// A reconciler's claim on an action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReconcileClaim {
    pub(crate) holder: String,
    pub(crate) until_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ActRecord {
    pub(crate) state: ActState,
    pub(crate) reconcile: Option<ReconcileClaim>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResHolder {
    attempt: String,
    key: String,
    until_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResRecord {
    generation: u64,
    holder: Option<ResHolder>,
}

/// A side-effect ledger on a backend.
pub struct Ledger<B> {
    pub(crate) backend: Arc<B>,
    pub(crate) clock: Clock,
}

impl<B> Clone for Ledger<B> {
    fn clone(&self) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            clock: Arc::clone(&self.clock),
        }
    }
}

pub(crate) fn act_key(key: &str) -> String {
    format!("act/{key}")
}

fn res_key(resource: &str) -> String {
    format!("res/{resource}")
}

pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64, RecipeError> {
    match u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX) {
        0 => Err(RecipeError::InvalidArgument(
            "a ttl must be at least 1 ms".into(),
        )),
        ms => Ok(ms),
    }
}

fn check_action(action: &Action) -> Result<(), RecipeError> {
    if action.key.is_empty() || action.resource.is_empty() {
        return Err(RecipeError::InvalidArgument(
            "an action needs a non-empty key and resource".into(),
        ));
    }
    Ok(())
}

/// The action's record in `snapshot` (idle when absent).
pub(crate) fn act_of(
    snapshot: &BTreeMap<String, Entry>,
    key: &str,
) -> Result<ActRecord, RecipeError> {
    Ok(decode(snapshot, &act_key(key))?.unwrap_or_default())
}

fn res_of(snapshot: &BTreeMap<String, Entry>, resource: &str) -> Result<ResRecord, RecipeError> {
    Ok(decode(snapshot, &res_key(resource))?.unwrap_or_default())
}

/// Whether the action's intent is `lease`'s attempt.
fn intent_is(act: &ActRecord, lease: &LedgerLease) -> bool {
    matches!(&act.state, ActState::Intent { attempt, resource, generation, .. }
        if *attempt == lease.attempt && *resource == lease.resource && *generation == lease.generation)
}

/// The three-way check: the lease's generation is the resource's latest, the
/// resource's holder is the attempt the grant minted, and the lease is the action's —
/// and, if `live`, it has not lapsed.
fn still_holds(
    act: &ActRecord,
    res: &ResRecord,
    lease: &LedgerLease,
    now: u64,
    live: bool,
) -> Result<(), RecipeError> {
    let holder_ok = res.holder.as_ref().is_some_and(|h| {
        h.attempt == lease.attempt && h.key == lease.key && (!live || h.until_ms > now)
    });
    if res.generation == lease.generation && holder_ok && intent_is(act, lease) {
        Ok(())
    } else {
        Err(RecipeError::LeaseLost(lease.key.clone()))
    }
}

impl<B: Backend> Ledger<B> {
    /// A ledger on `backend`, judging expiry by the system clock.
    pub fn new(backend: Arc<B>) -> Self {
        Self {
            backend,
            clock: system_clock(),
        }
    }

    /// The same ledger judging expiry by `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Decides whether `action` may be done now (done > uncertain > in flight >
    /// resource held > grant); a grant records the intent and holds the resource for
    /// `ttl`, in one transaction.
    pub async fn acquire(&self, action: &Action, ttl: Duration) -> Result<Acquired, RecipeError> {
        check_action(action)?;
        let ttl = ttl_millis(ttl)?;
        let keys = vec![act_key(&action.key), res_key(&action.resource)];
        cas_loop(&*self.backend, keys, |snapshot| {
            let now = (self.clock)();
            let act = act_of(snapshot, &action.key)?;
            match &act.state {
                ActState::Done { result } => {
                    return Ok(Step::Answer(Acquired::Done(result.clone())));
                }
                ActState::Uncertain { reason, .. } => {
                    return Ok(Step::Answer(Acquired::Uncertain {
                        reason: reason.clone(),
                    }));
                }
                ActState::Intent { until_ms, .. } if *until_ms > now => {
                    return Ok(Step::Answer(Acquired::InFlight {
                        until_ms: *until_ms,
                    }));
                }
                ActState::Intent { attempt, .. } => {
                    return Ok(Step::Answer(Acquired::Uncertain {
                        reason: format!("attempt {attempt} lapsed without recording an outcome"),
                    }));
                }
                ActState::Idle => {}
            }
            let res = res_of(snapshot, &action.resource)?;
            if let Some(holder) = &res.holder
                && holder.until_ms > now
            {
                return Ok(Step::Answer(Acquired::Contended {
                    until_ms: holder.until_ms,
                }));
            }
            let attempt = mint_token();
            let until_ms = now.saturating_add(ttl);
            let generation = res.generation + 1;
            let act = ActRecord {
                state: ActState::Intent {
                    attempt: attempt.clone(),
                    resource: action.resource.clone(),
                    generation,
                    until_ms,
                },
                reconcile: None,
            };
            let res = ResRecord {
                generation,
                holder: Some(ResHolder {
                    attempt: attempt.clone(),
                    key: action.key.clone(),
                    until_ms,
                }),
            };
            let lease = LedgerLease {
                key: action.key.clone(),
                resource: action.resource.clone(),
                attempt,
                generation,
                until_ms,
            };
            let writes = vec![
                put(&act_key(&action.key), &act),
                put(&res_key(&action.resource), &res),
            ];
            Ok(Step::Write(writes, Acquired::Granted(lease)))
        })
        .await
    }

    /// Extends a live lease by `ttl` from now. Refused ([`RecipeError::LeaseLost`]) if
    /// the resource changed hands, the attempt is no longer the action's intent, or the
    /// lease lapsed: a renewal that revived a lapsed lease would extend what may be
    /// someone else's hold.
    pub async fn renew(
        &self,
        lease: &LedgerLease,
        ttl: Duration,
    ) -> Result<LedgerLease, RecipeError> {
        let ttl = ttl_millis(ttl)?;
        let keys = vec![act_key(&lease.key), res_key(&lease.resource)];
        cas_loop(&*self.backend, keys, |snapshot| {
            let now = (self.clock)();
            let (mut act, mut res) = (
                act_of(snapshot, &lease.key)?,
                res_of(snapshot, &lease.resource)?,
            );
            still_holds(&act, &res, lease, now, true)?;
            let until = now.saturating_add(ttl);
            if let ActState::Intent { until_ms, .. } = &mut act.state {
                *until_ms = until;
            }
            if let Some(holder) = &mut res.holder {
                holder.until_ms = until;
            }
            let renewed = LedgerLease {
                until_ms: until,
                ..lease.clone()
            };
            let writes = vec![
                put(&act_key(&lease.key), &act),
                put(&res_key(&lease.resource), &res),
            ];
            Ok(Step::Write(writes, renewed))
        })
        .await
    }

    /// Records the effect as done with `result` and frees the resource. Idempotent:
    /// once done, every call returns the first result. A lapsed or superseded lease is
    /// refused, and its intent stays — uncertain, for reconciliation.
    pub async fn complete(
        &self,
        lease: &LedgerLease,
        result: &[u8],
    ) -> Result<Vec<u8>, RecipeError> {
        let keys = vec![act_key(&lease.key), res_key(&lease.resource)];
        cas_loop(&*self.backend, keys, |snapshot| {
            let now = (self.clock)();
            let (act, res) = (
                act_of(snapshot, &lease.key)?,
                res_of(snapshot, &lease.resource)?,
            );
            if let ActState::Done { result } = &act.state {
                return Ok(Step::Answer(result.clone()));
            }
            still_holds(&act, &res, lease, now, true)?;
            let done = ActRecord {
                state: ActState::Done {
                    result: result.to_vec(),
                },
                reconcile: None,
            };
            let freed = ResRecord {
                holder: None,
                ..res
            };
            let writes = vec![
                put(&act_key(&lease.key), &done),
                put(&res_key(&lease.resource), &freed),
            ];
            Ok(Step::Write(writes, result.to_vec()))
        })
        .await
    }

    /// Marks the action's outcome unknown (a timeout from the downstream system, say),
    /// replacing the intent in the same transaction: if the mark fails, the intent is
    /// still there and still blocks. The resource is not freed: [`Ledger::release`]
    /// does that.
    pub async fn mark_uncertain(
        &self,
        lease: &LedgerLease,
        reason: &str,
    ) -> Result<(), RecipeError> {
        cas_loop(&*self.backend, vec![act_key(&lease.key)], |snapshot| {
            let act = act_of(snapshot, &lease.key)?;
            if !intent_is(&act, lease) {
                return Err(RecipeError::LeaseLost(lease.key.clone()));
            }
            let uncertain = ActRecord {
                state: ActState::Uncertain {
                    attempt: lease.attempt.clone(),
                    reason: reason.to_string(),
                },
                reconcile: None,
            };
            Ok(Step::Write(vec![put(&act_key(&lease.key), &uncertain)], ()))
        })
        .await
    }

    /// Frees the resource if this lease still holds it (another holder's is left
    /// alone). The action's intent stays: until its outcome is settled, it is not
    /// done again.
    pub async fn release(&self, lease: &LedgerLease) -> Result<(), RecipeError> {
        cas_loop(&*self.backend, vec![res_key(&lease.resource)], |snapshot| {
            let res = res_of(snapshot, &lease.resource)?;
            let ours = res
                .holder
                .as_ref()
                .is_some_and(|h| h.attempt == lease.attempt);
            if !ours {
                return Ok(Step::Answer(()));
            }
            let freed = ResRecord {
                holder: None,
                ..res
            };
            Ok(Step::Write(
                vec![put(&res_key(&lease.resource), &freed)],
                (),
            ))
        })
        .await
    }

    /// Gives up the attempt, stating the effect did not happen: the intent is removed
    /// (the action may be done again) and the resource freed if still held by it.
    pub async fn abandon(&self, lease: &LedgerLease) -> Result<(), RecipeError> {
        let keys = vec![act_key(&lease.key), res_key(&lease.resource)];
        cas_loop(&*self.backend, keys, |snapshot| {
            let (act, res) = (
                act_of(snapshot, &lease.key)?,
                res_of(snapshot, &lease.resource)?,
            );
            if !intent_is(&act, lease) {
                return Err(RecipeError::LeaseLost(lease.key.clone()));
            }
            let mut writes = vec![Mutation::Delete(act_key(&lease.key))];
            if res
                .holder
                .as_ref()
                .is_some_and(|h| h.attempt == lease.attempt)
            {
                let freed = ResRecord {
                    holder: None,
                    ..res
                };
                writes.push(put(&res_key(&lease.resource), &freed));
            }
            Ok(Step::Write(writes, ()))
        })
        .await
    }
}
