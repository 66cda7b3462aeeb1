//! Transactions across entity groups, by two-phase commit (docs/protocol.md,
//! "Two-phase commit"; docs/client-api.md, "Transactions across groups").
//!
//! A [`MultiTransaction`] is one [`Transaction`] per group — each reads at its own
//! group's position and stages its writes, with every row and entity method a
//! single-group transaction has — committed together: all of their writes take effect
//! or none, and every current read in any of the groups sees all of them or none once
//! the commit is decided. The protocol core prepares every group but the first, decides
//! in the first (the *coordinator* group), and finishes the others: three round trips
//! where a single-group commit takes one, and rows the transaction read or writes are
//! locked meanwhile. Prefer a queue where an asynchronous effect will do (the paper's
//! advice); two-phase commit is for what must be atomic, such as claiming a unique name
//! together with what it names.

use megastore_paxos::{Decision, TwoPhaseResult, TxnFacts};
use megastore_types::{EgId, Position, TxnId};

use crate::client::{Client, ClientError};
use crate::groups::relative_conflicts;
use crate::txn::{ATTEMPTS_MAX, Attempt, AttemptFuture, Outcome, Transaction, settle_attempt};

/// Pause between looks at an undecided transaction's decision.
const DECISION_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// One attempt of a transaction across groups: one [`Transaction`] per group.
pub struct MultiTransaction {
    client: Client,
    parts: Vec<Transaction>,
}

impl MultiTransaction {
    /// The groups, in the order given (the first that reads or writes anything is the
    /// coordinator group, whose log records the decision).
    pub fn groups(&self) -> impl Iterator<Item = &EgId> {
        self.parts.iter().map(Transaction::eg)
    }

    /// The transaction on group `eg` (one of the groups it began with).
    pub fn on(&mut self, eg: &EgId) -> Result<&mut Transaction, ClientError> {
        self.parts.iter_mut().find(|t| t.eg() == eg).ok_or_else(|| {
            ClientError::InvalidArgument(format!(
                "group {eg} is not one of this transaction's groups"
            ))
        })
    }

    /// Its id if it commits across groups (its first group's transaction's: read or
    /// write there first); what [`Client::resolve_multi`] looks for.
    pub fn id(&self) -> TxnId {
        self.parts[0].id()
    }

    /// The transaction on its `index`-th group.
    pub fn part(&mut self, index: usize) -> Option<&mut Transaction> {
        self.parts.get_mut(index)
    }

    /// Commits the attempt's writes in every group at once, or none: a single-group
    /// commit when only one group was read or written, two-phase commit otherwise. An
    /// outcome that cannot be known at first is resolved by the coordinator group's
    /// decision before this returns (aborting the transaction, recorded, once it has
    /// been prepared longer than the prepared timeout); [`ClientError::Unknown`] only
    /// when even that could not be learned.
    pub async fn commit(self) -> Result<Attempt, ClientError> {
        let client = self.client;
        let mut touched: Vec<Transaction> = self
            .parts
            .into_iter()
            .filter(Transaction::touched)
            .collect();
        match touched.len() {
            0 => return Ok(Attempt::Done(Outcome::ReadOnly)),
            1 => return touched.remove(0).commit().await,
            _ => {}
        }
        let txn = touched[0].id();
        let mut groups = Vec::with_capacity(touched.len());
        let mut participants = Vec::with_capacity(touched.len());
        for part in touched {
            groups.push(part.eg().clone());
            participants.push(part.into_participant().await?);
        }
        let coordinator = groups[0].clone();
        match client.commit_two_phase(txn, participants).await? {
            TwoPhaseResult::Committed { position, .. } => Ok(Attempt::Done(Outcome::Committed {
                txn,
                position,
                resolved: false,
            })),
            TwoPhaseResult::Aborted { keys } => Ok(Attempt::Retry {
                keys: relative_keys(&groups, keys),
                resolved: false,
            }),
            TwoPhaseResult::Unknown { prepared_ms, .. } => {
                let facts = TxnFacts {
                    prepared_ms,
                    participants: groups.clone(),
                };
                match client
                    .resolve_multi_patiently(&coordinator, txn, Some(facts))
                    .await
                {
                    Some(Decision::Commit) => Ok(Attempt::Done(Outcome::Committed {
                        txn,
                        position: Position::NONE,
                        resolved: true,
                    })),
                    Some(Decision::Abort) => Ok(Attempt::Retry {
                        keys: Vec::new(),
                        resolved: true,
                    }),
                    None => Err(ClientError::Unknown {
                        txn,
                        position: Position::NONE,
                    }),
                }
            }
        }
    }
}

/// Conflicting row keys as the caller named them: keys within an untyped group.
fn relative_keys(groups: &[EgId], keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    keys.into_iter()
        .map(
            |key| match groups.iter().find(|eg| key.starts_with(&eg.0)) {
                Some(eg) => relative_conflicts(eg, vec![key]).remove(0),
                None => key,
            },
        )
        .collect()
}

impl Client {
    /// One transaction across the groups of `parts` (transactions begun with
    /// [`Client::begin`], each on a different group, whatever they read and wrote so
    /// far): what the gRPC API's `CommitMulti` commits.
    pub fn multi_of(&self, parts: Vec<Transaction>) -> Result<MultiTransaction, ClientError> {
        for (i, part) in parts.iter().enumerate() {
            if parts[..i].iter().any(|p| p.eg() == part.eg()) {
                return Err(ClientError::InvalidArgument(format!(
                    "txns[{i}]: group {} has a transaction earlier in the list",
                    part.eg()
                )));
            }
        }
        Ok(MultiTransaction {
            client: self.clone(),
            parts,
        })
    }

    /// Starts one attempt of a transaction across `groups` (at least one; each named
    /// once).
    pub fn begin_multi(&self, groups: &[EgId]) -> Result<MultiTransaction, ClientError> {
        if groups.is_empty() {
            return Err(ClientError::InvalidArgument(
                "groups: name at least one group".into(),
            ));
        }
        for (i, eg) in groups.iter().enumerate() {
            if eg.0.is_empty() {
                return Err(ClientError::InvalidArgument(format!(
                    "groups[{i}]: name a group"
                )));
            }
            if groups[..i].contains(eg) {
                return Err(ClientError::InvalidArgument(format!(
                    "groups[{i}]: group {eg} is named twice"
                )));
            }
        }
        Ok(MultiTransaction {
            client: self.clone(),
            parts: groups.iter().map(|eg| self.begin(eg)).collect(),
        })
    }

    /// Runs `body` as one serializable transaction across `groups`, again on conflict
    /// (up to a bound): its writes in every group commit together or not at all
    /// (two-phase commit: see [`MultiTransaction`]). `body` gets a fresh
    /// [`MultiTransaction`] on every attempt and must do all its reads through it.
    pub async fn transaction_multi<T, F>(
        &self,
        groups: &[EgId],
        mut body: F,
    ) -> Result<(T, Outcome), ClientError>
    where
        F: AsyncFnMut(&mut MultiTransaction) -> Result<T, ClientError>,
    {
        let mut last_keys = Vec::new();
        for attempt in 0..ATTEMPTS_MAX {
            let mut txn = self.begin_multi(groups)?;
            let value = body(&mut txn).await?;
            if let Some(outcome) =
                settle_attempt(txn.commit().await?, attempt, &mut last_keys).await?
            {
                return Ok((value, outcome));
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }

    /// [`Client::transaction_multi`] with a `Send` future, for `tokio::spawn` and other
    /// multi-threaded executors: `body` returns its attempt boxed,
    /// `|txn| Box::pin(async move { … })`.
    pub async fn transaction_multi_send<T, F>(
        &self,
        groups: &[EgId],
        mut body: F,
    ) -> Result<(T, Outcome), ClientError>
    where
        T: Send,
        F: for<'t> FnMut(&'t mut MultiTransaction) -> AttemptFuture<'t, T> + Send,
    {
        let mut last_keys = Vec::new();
        for attempt in 0..ATTEMPTS_MAX {
            let mut txn = self.begin_multi(groups)?;
            let value = body(&mut txn).await?;
            if let Some(outcome) =
                settle_attempt(txn.commit().await?, attempt, &mut last_keys).await?
            {
                return Ok((value, outcome));
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }

    /// Whether cross-group transaction `txn`, coordinated by group `coordinator`,
    /// committed: its decision, read from that group — `Some(true)` committed,
    /// `Some(false)` aborted (final: running it again is safe), `None` not decided yet
    /// (its participants stay prepared until it is, or until the prepared timeout, after
    /// which whoever meets them records abort).
    pub async fn resolve_multi(
        &self,
        coordinator: &EgId,
        txn: TxnId,
    ) -> Result<Option<bool>, ClientError> {
        Ok(self
            .two_phase_decision(coordinator, txn, None)
            .await?
            .map(|d| d == Decision::Commit))
    }

    /// Looks up a cross-group transaction's decision until there is one or the resolve
    /// patience runs out; with its `facts`, an undecided one is aborted (recorded
    /// first) once it has been prepared longer than the prepared timeout.
    pub(crate) async fn resolve_multi_patiently(
        &self,
        coordinator: &EgId,
        txn: TxnId,
        facts: Option<TxnFacts>,
    ) -> Option<Decision> {
        let started = tokio::time::Instant::now();
        loop {
            if let Ok(Some(decision)) = self
                .two_phase_decision(coordinator, txn, facts.clone())
                .await
            {
                return Some(decision);
            }
            // The prepared timeout must have passed before an abort can be recorded.
            let patience = self
                .timeouts()
                .resolve_patience
                .max(self.timeouts().prepared * 2);
            if started.elapsed() >= patience {
                return None;
            }
            tokio::time::sleep(DECISION_PAUSE).await;
        }
    }
}
