//! Row-level transactions: reads from one position, writes committed at the next.

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::{CellWrite, CommitResult, DataQuery, ReadMode, RowWrite};
use megastore_rowstore::Row;
use megastore_types::{EgId, Position, ReplicaId};

use crate::client::{Client, ClientError, Committed};

/// Attempts of one [`Client::transaction`] before it gives up on conflicts.
const ATTEMPTS_MAX: u32 = 8;

/// One attempt of a transaction on one entity group. Reads are current reads that
/// must all come from one log position (a read that finds a later one ends the attempt
/// as a conflict, and the transaction runs again); writes are buffered, seen by later
/// reads of the same transaction, and committed as one log entry.
pub struct Transaction {
    client: Client,
    eg: EgId,
    position: Option<(Position, Option<ReplicaId>)>,
    read_keys: BTreeSet<Vec<u8>>,
    writes: BTreeMap<Vec<u8>, Vec<CellWrite>>,
    moved: bool,
}

impl Transaction {
    fn new(client: Client, eg: EgId) -> Self {
        Self {
            client,
            eg,
            position: None,
            read_keys: BTreeSet::new(),
            writes: BTreeMap::new(),
            moved: false,
        }
    }

    /// The entity group.
    pub fn eg(&self) -> &EgId {
        &self.eg
    }

    /// Reads a row as of the transaction's position, with its own writes applied.
    pub async fn get(&mut self, row: &[u8]) -> Result<Option<Row>, ClientError> {
        self.read_keys.insert(row.to_vec());
        let read = self
            .client
            .read(
                &self.eg,
                ReadMode::Current,
                DataQuery::Rows(vec![row.to_vec()]),
            )
            .await?;
        let position = read.position.unwrap_or(Position::NONE);
        match self.position {
            None => self.position = Some((position, read.next_leader)),
            Some((first, _)) if first != position => self.moved = true,
            Some(_) => {}
        }
        let mut found = read.rows.into_iter().find(|r| r.key == row);
        if let Some(cells) = self.writes.get(row) {
            found = own_writes(row, found, cells);
        }
        Ok(found)
    }

    /// Sets a column of a row.
    pub fn set(&mut self, row: &[u8], column: &[u8], value: &[u8]) {
        self.writes
            .entry(row.to_vec())
            .or_default()
            .push(CellWrite::Set {
                column: column.to_vec(),
                value: value.to_vec(),
            });
    }

    /// Deletes a column of a row.
    pub fn delete(&mut self, row: &[u8], column: &[u8]) {
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

impl Client {
    /// Runs `body` as a serializable transaction on `eg`, again on conflict (up to a
    /// bound). `body` gets a fresh [`Transaction`] on every attempt and must do all its
    /// reads through it; what it returns is returned once its writes committed.
    pub async fn transaction<T, F>(
        &self,
        eg: &EgId,
        mut body: F,
    ) -> Result<(T, Committed), ClientError>
    where
        F: AsyncFnMut(&mut Transaction) -> Result<T, ClientError>,
    {
        let mut last_keys = Vec::new();
        for _ in 0..ATTEMPTS_MAX {
            let mut txn = Transaction::new(self.clone(), eg.clone());
            let value = body(&mut txn).await?;
            if txn.moved {
                last_keys = Vec::new();
                continue;
            }
            let (position, leader) = match txn.position {
                Some(p) => p,
                // Blind writes: read the group's position first.
                None => {
                    let read = self
                        .read(eg, ReadMode::Current, DataQuery::Rows(Vec::new()))
                        .await?;
                    (read.position.unwrap_or(Position::NONE), read.next_leader)
                }
            };
            let writes = txn
                .writes
                .into_iter()
                .map(|(row, cells)| RowWrite { row, cells })
                .collect();
            let committed = self
                .commit(eg, position, leader, writes, txn.read_keys)
                .await?;
            match &committed.result {
                CommitResult::Committed { .. } => return Ok((value, committed)),
                CommitResult::Conflict { keys } => last_keys = keys.clone(),
                CommitResult::Aborted => last_keys = Vec::new(),
                CommitResult::Unknown { position } => {
                    return Err(ClientError::Unknown {
                        txn: committed.txn,
                        position: *position,
                    });
                }
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }
}
