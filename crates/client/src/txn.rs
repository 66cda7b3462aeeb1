//! Row-level transactions: reads from one position, writes committed at the next.
//!
//! The first read (or [`Transaction::position`]) is a current read, and fixes the
//! transaction's position `p`; every later read is a read at `p` from a replica that
//! has applied it, so every read of one transaction sees one committed state — a
//! read-only transaction needs no commit for that. The commit goes to `p + 1`.

use std::collections::BTreeMap;

use megastore_paxos::{
    CellWrite, CommitResult, DataQuery, Participant, ReadMode, ReadSet, Resolution, RowWrite,
    check_proposed_writes,
};
use megastore_rowstore::{KeyRange, Row};
use megastore_types::{EgId, Position, ReplicaId, TxnId};

use crate::client::{Client, ClientError};
use crate::groups::{
    check_cell_write, relative_conflicts, relative_row, require_untyped, row_of_key, rows_of_range,
};

/// Waits before attempt `attempt + 1` of a transaction that conflicted: a random
/// pause whose range doubles with every attempt (10 ms, 20 ms, … up to 640 ms), so
/// racers for the same rows stop meeting and none of them starves.
pub(crate) async fn retry_pause(attempt: u32) {
    let range_ms = 10u64 << attempt.min(6);
    let pause = rand::random::<u64>() % range_ms;
    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
}

/// Attempts of one [`Client::transaction`] before it gives up on conflicts.
pub(crate) const ATTEMPTS_MAX: u32 = 8;

/// One attempt of a transaction on one entity group. Its reads all come from one log
/// position (the first read's, a current read); writes are buffered, seen by later
/// reads of the same transaction, and committed as one log entry at the next position.
///
/// The row methods ([`get`](Self::get), [`scan`](Self::scan), [`set`](Self::set),
/// [`delete`](Self::delete)) take keys within an untyped group ([`crate::group`]); a
/// typed group's rows are read and written as entities.
pub struct Transaction {
    client: Client,
    /// Its id, chosen when it begins, so it can be resolved by it.
    id: TxnId,
    eg: EgId,
    /// Its position and the next position's leader, once the first read fixed them.
    position: Option<(Position, Option<ReplicaId>)>,
    reads: ReadSet,
    writes: BTreeMap<Vec<u8>, Vec<CellWrite>>,
    /// How many queue messages it sent (the next one's index).
    sent: u32,
    /// Begun blind ([`Client::begin_blind`]): it only writes, and its position is a
    /// blind write's basis.
    write_only: bool,
}

impl Transaction {
    fn new(client: Client, eg: EgId, write_only: bool) -> Self {
        Self {
            id: client.new_txn_id(),
            client,
            eg,
            position: None,
            reads: ReadSet::default(),
            writes: BTreeMap::new(),
            sent: 0,
            write_only,
        }
    }

    /// The index of the next queue message this transaction sends.
    pub(crate) fn next_send(&mut self) -> u32 {
        self.sent += 1;
        self.sent - 1
    }

    /// Declares rows read (they conflict with writes after its position).
    pub(crate) fn declare_read(&mut self, rows: impl IntoIterator<Item = Vec<u8>>) {
        self.reads.rows.extend(rows);
    }

    /// The entity group.
    pub fn eg(&self) -> &EgId {
        &self.eg
    }

    /// The transaction's id: what its log entry carries, and what
    /// [`Client::resolve_commit`] looks for at [`Transaction::commit_position`].
    pub fn id(&self) -> TxnId {
        self.id
    }

    /// The one log position this transaction can commit at (the one after its
    /// position), once its first read fixed that.
    pub fn commit_position(&self) -> Option<Position> {
        self.position.map(|(p, _)| p.next())
    }

    /// The log position every read of this transaction sees, fixed by its first read
    /// (this makes that read if there was none yet). For a transaction begun blind
    /// ([`Client::begin_blind`]), the position it commits after: a blind write's
    /// basis, which need not be the group's newest.
    pub async fn position(&mut self) -> Result<Position, ClientError> {
        if self.position.is_none() {
            if self.write_only {
                let basis = self.client.blind_basis(&self.eg).await?;
                self.reads.saw_prepared(&basis.prepared);
                self.position = Some((basis.read_position, basis.leader));
            } else {
                self.read_at_position(DataQuery::Rows(Vec::new())).await?;
            }
        }
        Ok(self.position.map_or(Position::NONE, |(p, _)| p))
    }

    /// Reads key `key` of the (untyped) group as of the transaction's position, with
    /// its own writes applied.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Row>, ClientError> {
        let row = row_of_key(&self.eg, key)?;
        let found = self.get_row(&row).await?;
        Ok(found.map(|r| relative_row(&self.eg, r)))
    }

    /// Reads the keys of the (untyped) group in `range` (an empty start: the first
    /// key; no end: the last) as of the transaction's position, with its own writes
    /// applied, in key order (at most `limit`). A later write to any key of the range
    /// — also a new one — conflicts with this transaction.
    pub async fn scan(
        &mut self,
        range: KeyRange,
        limit: Option<usize>,
    ) -> Result<Vec<Row>, ClientError> {
        let rows = rows_of_range(&self.eg, &range)?;
        let found = self.scan_rows(rows, limit, false).await?;
        Ok(found
            .into_iter()
            .map(|r| relative_row(&self.eg, r))
            .collect())
    }

    /// Sets a column of key `key` of the (untyped) group.
    pub fn set(&mut self, key: &[u8], column: &[u8], value: &[u8]) -> Result<(), ClientError> {
        check_cell_write(key, column, Some(value))?;
        let row = row_of_key(&self.eg, key)?;
        self.set_row(&row, column, value);
        Ok(())
    }

    /// Deletes a column of key `key` of the (untyped) group.
    pub fn delete(&mut self, key: &[u8], column: &[u8]) -> Result<(), ClientError> {
        check_cell_write(key, column, None)?;
        let row = row_of_key(&self.eg, key)?;
        self.delete_row(&row, column);
        Ok(())
    }

    /// Reads a row (a key of the row store) as of the transaction's position, with its
    /// own writes applied.
    pub(crate) async fn get_row(&mut self, row: &[u8]) -> Result<Option<Row>, ClientError> {
        self.reads.rows.insert(row.to_vec());
        let rows = self
            .read_at_position(DataQuery::Rows(vec![row.to_vec()]))
            .await?;
        let mut found = rows.into_iter().find(|r| r.key == row);
        if let Some(cells) = self.writes.get(row) {
            found = own_writes(row, found, cells);
        }
        Ok(found)
    }

    /// Reads the rows of a key range of the group as of the transaction's position,
    /// with its own writes applied, in key order or `reverse` (at most `limit`), and
    /// puts the range in the read set.
    pub(crate) async fn scan_rows(
        &mut self,
        range: KeyRange,
        limit: Option<usize>,
        reverse: bool,
    ) -> Result<Vec<Row>, ClientError> {
        self.reads.ranges.push(range.clone());
        // Own writes may remove rows from the answer: ask for enough to fill `limit`.
        let asked = limit.map(|l| l + self.writes.len());
        let query = DataQuery::Scan {
            range: range.clone(),
            limit: asked,
            reverse,
        };
        let rows = self.read_at_position(query).await?;
        let mut merged: BTreeMap<Vec<u8>, Option<Row>> =
            rows.into_iter().map(|r| (r.key.clone(), Some(r))).collect();
        for (key, cells) in self.writes.iter().filter(|(k, _)| range.contains(k)) {
            let before = merged.remove(key).flatten();
            merged.insert(key.clone(), own_writes(key, before, cells));
        }
        let mut rows: Vec<Row> = merged.into_values().flatten().collect();
        if reverse {
            rows.reverse();
        }
        if let Some(limit) = limit {
            rows.truncate(limit);
        }
        Ok(rows)
    }

    /// A read as of the transaction's position: the first is a current read and fixes
    /// it; every later one reads at that position.
    async fn read_at_position(&mut self, query: DataQuery) -> Result<Vec<Row>, ClientError> {
        if self.write_only {
            // Its position may be older than writes already acknowledged: a read
            // there would not be current.
            return Err(ClientError::InvalidArgument(
                "this transaction was begun blind: it only writes (begin one that reads instead)"
                    .to_string(),
            ));
        }
        let mode = match self.position {
            None => ReadMode::Current,
            Some((p, _)) => ReadMode::AtPosition(p),
        };
        let read = self.client.read_rows(&self.eg, mode, query).await?;
        // The locks of cross-group transactions prepared at its position hold against
        // its commit (every read at the position names the same ones).
        self.reads.saw_prepared(&read.prepared);
        if self.position.is_none() {
            self.position = Some((read.position.unwrap_or(Position::NONE), read.next_leader));
        }
        Ok(read.rows)
    }

    /// Sets a column of a row.
    pub(crate) fn set_row(&mut self, row: &[u8], column: &[u8], value: &[u8]) {
        self.writes
            .entry(row.to_vec())
            .or_default()
            .push(CellWrite::Set {
                column: column.to_vec(),
                value: value.to_vec(),
            });
    }

    /// Deletes a column of a row.
    pub(crate) fn delete_row(&mut self, row: &[u8], column: &[u8]) {
        self.writes
            .entry(row.to_vec())
            .or_default()
            .push(CellWrite::Delete {
                column: column.to_vec(),
            });
    }
}

/// A row as the transaction sees it after its own writes.
fn own_writes(key: &[u8], row: Option<Row>, cells: &[CellWrite]) -> Option<Row> {
    let mut row = row.unwrap_or(Row {
        key: key.to_vec(),
        cells: BTreeMap::new(),
    });
    for cell in cells {
        match cell {
            CellWrite::Set { column, value } => {
                row.cells.insert(
                    column.clone(),
                    megastore_rowstore::Cell {
                        timestamp: u64::MAX,
                        value: value.clone(),
                    },
                );
            }
            CellWrite::Delete { column } => {
                row.cells.remove(column);
            }
        }
    }
    (!row.cells.is_empty()).then_some(row)
}

/// Pause between attempts to resolve an unknown commit outcome.
const RESOLVE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// How a transaction run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its writes were committed at this position.
    Committed {
        /// The transaction's id.
        txn: TxnId,
        /// Its log position (for a transaction across groups, its coordinator group's
        /// position of the decision; 0 when that was unknown and then found by the
        /// decision).
        position: Position,
        /// The commit first ended without knowing whether it was chosen (its writer
        /// lost contact); settling its position then found its transaction there.
        resolved: bool,
    },
    /// It wrote nothing, so nothing was committed (its reads were all from one
    /// position, which is what a read-only transaction needs).
    ReadOnly,
}

/// What one attempt of a transaction came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Done: committed, or nothing to commit.
    Done(Outcome),
    /// Not committed, and running it again is safe: it conflicted (these keys it read
    /// were written in between; empty when the conflict was elsewhere), or its commit
    /// was settled without it.
    Retry {
        /// The conflicting keys (within the group, for an untyped group; row keys of
        /// the row store for a typed one).
        keys: Vec<Vec<u8>>,
        /// The commit's outcome was first unknown; its position was then settled
        /// without it.
        resolved: bool,
    },
}

impl Transaction {
    /// Commits the attempt's writes at the position after its reads (nothing, for a
    /// read-only attempt). A commit whose outcome cannot be known at first is resolved
    /// by its transaction id before this returns: its position is settled and the
    /// transaction looked for in the chosen entry ([`Client::resolve_commit`]);
    /// [`ClientError::Unknown`] only when even that could not be decided.
    pub async fn commit(self) -> Result<Attempt, ClientError> {
        if self.writes.is_empty() {
            return Ok(Attempt::Done(Outcome::ReadOnly));
        }
        let (client, id) = (self.client.clone(), self.id);
        let mut txn = self;
        let mut writes = txn.checked_writes()?;
        if txn.blind() {
            // While this client's commit to the group is in flight, a blind write
            // takes that commit's read instead of reading (docs/protocol.md, "Combining
            // commits"): it joins the next entry at once.
            match client.commit_blind(id, &txn.eg, writes).await? {
                Ok(committed) => {
                    return Self::outcome(&client, &txn.eg, committed.txn, committed.result).await;
                }
                Err(unstarted) => writes = unstarted,
            }
        }
        let participant = txn.participant_with(writes).await?;
        let committed = client
            .commit(
                id,
                &participant.eg,
                participant.read_position,
                participant.leader,
                participant.writes,
                participant.reads,
            )
            .await?;
        Self::outcome(&client, &participant.eg, committed.txn, committed.result).await
    }

    /// Whether it writes without having read anything (not even declared a read).
    fn blind(&self) -> bool {
        self.position.is_none()
            && self.reads.rows.is_empty()
            && self.reads.ranges.is_empty()
            && self.reads.prepared.is_empty()
    }

    /// Its writes as log entry rows, checked.
    fn checked_writes(&mut self) -> Result<Vec<RowWrite>, ClientError> {
        let writes: Vec<RowWrite> = std::mem::take(&mut self.writes)
            .into_iter()
            .map(|(row, cells)| RowWrite { row, cells })
            .collect();
        check_proposed_writes(&self.eg, &writes)
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        Ok(writes)
    }

    /// Whether the attempt read or wrote anything.
    pub(crate) fn touched(&self) -> bool {
        self.position.is_some() || !self.writes.is_empty()
    }

    /// What this attempt commits as one group of a cross-group commit: its read
    /// position (a current read now, for a blind write), its writes (checked) and its
    /// read set.
    ///
    /// A current read, not a blind write's snapshot basis (docs/protocol.md, "A blind
    /// write's basis"): the two-phase commit's prepare is committed by the core, which
    /// does not learn from it that a snapshot was stale, so a replica far behind would
    /// abort the transaction's every retry.
    pub(crate) async fn into_participant(mut self) -> Result<Participant, ClientError> {
        let writes = self.checked_writes()?;
        if self.position.is_none() && !self.write_only {
            self.read_at_position(DataQuery::Rows(Vec::new())).await?;
        }
        self.participant_with(writes).await
    }

    /// [`into_participant`](Self::into_participant) with its writes taken out and checked.
    async fn participant_with(self, writes: Vec<RowWrite>) -> Result<Participant, ClientError> {
        let mut reads = self.reads;
        let (position, leader) = match self.position {
            Some(p) => p,
            // Blind writes: their basis first.
            None => {
                let basis = self.client.blind_basis(&self.eg).await?;
                reads.saw_prepared(&basis.prepared);
                (basis.read_position, basis.leader)
            }
        };
        Ok(Participant {
            eg: self.eg,
            read_position: position,
            leader,
            writes,
            reads,
        })
    }

    /// A commit of unknown outcome, as resolved (`position`: where it was looked for).
    fn resolved(
        txn: TxnId,
        position: Position,
        resolution: Resolution,
    ) -> Result<Attempt, ClientError> {
        Ok(match resolution {
            Resolution::Committed(at) => Attempt::Done(Outcome::Committed {
                txn,
                position: at,
                resolved: true,
            }),
            // Settled without it: not committed, so running again is safe.
            Resolution::NotCommitted => Attempt::Retry {
                keys: Vec::new(),
                resolved: true,
            },
            Resolution::Undecided => return Err(ClientError::Unknown { txn, position }),
        })
    }

    async fn outcome(
        client: &Client,
        eg: &EgId,
        txn: TxnId,
        result: CommitResult,
    ) -> Result<Attempt, ClientError> {
        Ok(match result {
            CommitResult::Committed { position, .. } => Attempt::Done(Outcome::Committed {
                txn,
                position,
                resolved: false,
            }),
            CommitResult::Conflict { keys } => Attempt::Retry {
                keys: relative_conflicts(eg, keys),
                resolved: false,
            },
            CommitResult::Aborted => Attempt::Retry {
                keys: Vec::new(),
                resolved: false,
            },
            CommitResult::Unknown { position } => {
                let resolution = client.resolve_patiently(eg, position, txn).await;
                return Self::resolved(txn, position, resolution);
            }
            // Relayed, and its relay did not answer: anywhere in its commit span.
            CommitResult::UnknownInSpan { first } => {
                let resolution = client.resolve_patiently_from_first(eg, first, txn).await;
                return Self::resolved(txn, first, resolution);
            }
        })
    }
}

/// One attempt of a [`Client::transaction_send`] body.
pub type AttemptFuture<'t, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, ClientError>> + Send + 't>>;

/// Commits one attempt: its outcome, or `None` after a pause when it must run again
/// (`last_keys` then holds its conflicting rows).
async fn finish_attempt(
    txn: Transaction,
    attempt: u32,
    last_keys: &mut Vec<Vec<u8>>,
) -> Result<Option<Outcome>, ClientError> {
    settle_attempt(txn.commit().await?, attempt, last_keys).await
}

/// What an attempt's commit came to: its outcome, or `None` after a pause when it must
/// run again (`last_keys` then holds its conflicting rows).
pub(crate) async fn settle_attempt(
    committed: Attempt,
    attempt: u32,
    last_keys: &mut Vec<Vec<u8>>,
) -> Result<Option<Outcome>, ClientError> {
    match committed {
        Attempt::Done(outcome) => Ok(Some(outcome)),
        Attempt::Retry { keys, .. } => {
            *last_keys = keys;
            retry_pause(attempt).await;
            Ok(None)
        }
    }
}

impl Client {
    /// Starts one attempt of a transaction on `eg` (see [`Client::transaction`] for
    /// the loop that retries it).
    pub fn begin(&self, eg: &EgId) -> Transaction {
        Transaction::new(self.clone(), eg.clone(), false)
    }

    /// Starts a transaction on `eg` that only writes (a blind write): its reads are
    /// refused, and [`Transaction::position`] fixes the position it commits after —
    /// lent at once by this client's commit to the group in flight, else read as a
    /// blind write reads it (a snapshot read, of the relay while the group's commits are
    /// relayed; docs/protocol.md, "A blind write's basis"). For a caller that must know the
    /// transaction's first position before its writes (the public API's Begin, whose
    /// id names it); [`Client::begin`] serves a blind write as well, fixing its basis
    /// only at commit.
    pub fn begin_blind(&self, eg: &EgId) -> Transaction {
        Transaction::new(self.clone(), eg.clone(), true)
    }

    /// Starts one attempt of a transaction on an untyped group, refusing any other.
    pub(crate) fn begin_untyped(&self, eg: &EgId) -> Result<Transaction, ClientError> {
        require_untyped(eg)?;
        Ok(self.begin(eg))
    }

    /// Runs `body` as a serializable transaction on `eg`, again on conflict (up to a
    /// bound). `body` gets a fresh [`Transaction`] on every attempt and must do all its
    /// reads through it; what it returns is returned once its writes committed.
    ///
    /// The returned future is not `Send` (an async closure's future cannot promise it);
    /// code that spawns transactions onto a multi-threaded runtime uses
    /// [`Client::transaction_send`].
    pub async fn transaction<T, F>(
        &self,
        eg: &EgId,
        mut body: F,
    ) -> Result<(T, Outcome), ClientError>
    where
        F: AsyncFnMut(&mut Transaction) -> Result<T, ClientError>,
    {
        let mut last_keys = Vec::new();
        for attempt in 0..ATTEMPTS_MAX {
            let mut txn = self.begin(eg);
            let value = body(&mut txn).await?;
            if let Some(outcome) = finish_attempt(txn, attempt, &mut last_keys).await? {
                return Ok((value, outcome));
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }

    /// [`Client::transaction`] with a `Send` future, for `tokio::spawn` and other
    /// multi-threaded executors: `body` returns its attempt boxed,
    /// `|txn| Box::pin(async move { … })`.
    pub async fn transaction_send<T, F>(
        &self,
        eg: &EgId,
        mut body: F,
    ) -> Result<(T, Outcome), ClientError>
    where
        T: Send,
        F: for<'t> FnMut(&'t mut Transaction) -> AttemptFuture<'t, T> + Send,
    {
        let mut last_keys = Vec::new();
        for attempt in 0..ATTEMPTS_MAX {
            let mut txn = self.begin(eg);
            let value = body(&mut txn).await?;
            if let Some(outcome) = finish_attempt(txn, attempt, &mut last_keys).await? {
                return Ok((value, outcome));
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }

    /// Resolves a commit of unknown outcome, settling its position again until it is
    /// decided or the client's resolve patience runs out (the position stays unsettled
    /// while no majority is reachable; replicas' sweeps finish it once they can).
    /// Any client may resolve any transaction: it needs only the group, the position
    /// and the id.
    pub async fn resolve_patiently(&self, eg: &EgId, position: Position, txn: TxnId) -> Resolution {
        self.resolve_patiently_at(eg, position, false, txn).await
    }

    /// [`resolve_patiently`](Self::resolve_patiently) knowing only the transaction's
    /// first position: every position of its commit span is settled
    /// ([`resolve_commit_from_first`](Self::resolve_commit_from_first)).
    pub async fn resolve_patiently_from_first(
        &self,
        eg: &EgId,
        first: Position,
        txn: TxnId,
    ) -> Resolution {
        self.resolve_patiently_at(eg, first, true, txn).await
    }

    async fn resolve_patiently_at(
        &self,
        eg: &EgId,
        position: Position,
        span: bool,
        txn: TxnId,
    ) -> Resolution {
        let started = tokio::time::Instant::now();
        loop {
            match self.resolve_at(eg, position, span, txn).await {
                Ok(Resolution::Undecided) | Err(_) => {}
                Ok(decided) => return decided,
            }
            if !self.timeouts().keeps_resolving(started.elapsed()) {
                return Resolution::Undecided;
            }
            tokio::time::sleep(RESOLVE_PAUSE).await;
        }
    }
}
