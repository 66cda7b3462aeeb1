//! Watches: every committed change to a range of one untyped group's keys, or to its
//! versioned keys under a prefix, in log order, each with its position.
//!
//! A watch reads the group's log one position at a time from any replica that has it
//! visible ([`megastore_paxos::watch`]: visible means committed), starting where the
//! caller asks. When it has read everything it knows of, it asks a replica (the one
//! that served it last, at first its own site's) to answer once the group's visible
//! position passes what it has seen — a long poll the replica holds up to
//! [`AWAIT_WAIT`]. If that wait ends with nothing, or the replica cannot hold it, a
//! current read learns how far the log goes (and catches a lagging replica up); a
//! replica that keeps answering at once is asked again after a pause that doubles from
//! [`POLL_FIRST`] up to [`POLL_MAX`].
//!
//! Resuming: [`Watch::resume_at`] is the first position not yet examined; a new watch
//! from there (on any client, at any site) continues with no change skipped or
//! repeated. A position below what every replica keeps of the log
//! (`[history] log_positions` below what all have applied) is refused with
//! [`ClientError::Collected`].

use std::time::{Duration, Instant};

use megastore_paxos::watch::{Change, LogRead, changes_in};
use megastore_paxos::{CellWrite, DataQuery, ReadMode, RowWrite};
use megastore_rowstore::KeyRange;
use megastore_schema::keyspace;
use megastore_types::{EgId, Position, ReplicaId, TxnId};

use crate::client::{Client, ClientError};
use crate::groups::rows_of_range;
use crate::versioned::{Entry, key_of_row, key_prefix_range, parse_version};

/// How long a replica may hold a caught-up watch's request for the next change.
pub const AWAIT_WAIT: Duration = Duration::from_secs(1);
/// The first pause after a replica answered at once with nothing new.
pub const POLL_FIRST: Duration = Duration::from_millis(2);
/// The longest such pause.
pub const POLL_MAX: Duration = Duration::from_millis(50);

/// The changes one committed position made to the watched keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// The position.
    pub position: Position,
    /// Each transaction's writes there (rows named by their keys within the group), in
    /// serial order.
    pub changes: Vec<Change>,
}

/// A stream of a group's committed changes to a range of keys ([`Client::watch`]).
pub struct Watch {
    client: Client,
    eg: EgId,
    rows: KeyRange,
    next: Position,
    committed_through: Position,
    source: Option<ReplicaId>,
    idle: Duration,
}

impl Client {
    /// Watches the keys of untyped group `eg` in `range` (an empty start: from the
    /// first key; no end: to the last) from log position `from` (0 and 1 both mean the
    /// group's first position).
    pub fn watch(&self, eg: &EgId, range: &KeyRange, from: Position) -> Result<Watch, ClientError> {
        let rows = rows_of_range(eg, range)?;
        Ok(self.watch_rows(eg, rows, from))
    }

    /// Watches the versioned keys ([`Client::versioned_txn`]) of `eg` that start with
    /// `prefix`, from log position `from`.
    pub fn watch_keys(
        &self,
        eg: &EgId,
        prefix: &[u8],
        from: Position,
    ) -> Result<KeyWatch, ClientError> {
        let rows = key_prefix_range(eg, prefix)?;
        Ok(KeyWatch {
            inner: self.watch_rows(eg, rows, from),
        })
    }

    fn watch_rows(&self, eg: &EgId, rows: KeyRange, from: Position) -> Watch {
        let next = from.max(Position(1));
        Watch {
            client: self.clone(),
            eg: eg.clone(),
            rows,
            next,
            committed_through: next.prev(),
            source: None,
            idle: POLL_FIRST,
        }
    }
}

impl Watch {
    /// The first position this watch has not examined yet: where a new watch resumes
    /// it without a gap or a repeat.
    pub fn resume_at(&self) -> Position {
        self.next
    }

    /// The next position with a change to the watched keys, waiting for one to be
    /// committed if need be.
    pub async fn next(&mut self) -> Result<WatchEvent, ClientError> {
        loop {
            if self.next <= self.committed_through {
                if let Some(event) = self.examine_next().await? {
                    return Ok(event);
                }
                continue;
            }
            // Caught up: the replica that served last holds the request until the
            // group's visible position there passes what the watch has seen.
            let began = Instant::now();
            let moved = self
                .client
                .await_visible(&self.eg, self.committed_through, self.source, AWAIT_WAIT)
                .await?;
            if let Some((replica, visible)) = moved {
                self.committed_through = visible;
                self.source = Some(replica);
                self.idle = POLL_FIRST;
                continue;
            }
            // Nothing there: a current read (of no rows) finds the group's newest
            // committed position, at a replica that has applied it (bringing one that
            // fell behind up to date).
            let read = self
                .client
                .read_rows(&self.eg, ReadMode::Current, DataQuery::Rows(Vec::new()))
                .await?;
            // The next wait is at the replica that just answered: the last one may be
            // gone.
            self.source = Some(read.replica);
            match read.position {
                Some(p) if p >= self.next => {
                    self.committed_through = p;
                    self.idle = POLL_FIRST;
                }
                // The replica answered at once (it could not hold the request, or is
                // rejoining): wait a little before asking again.
                _ if began.elapsed() < AWAIT_WAIT / 2 => {
                    tokio::time::sleep(self.idle).await;
                    self.idle = (self.idle * 2).min(POLL_MAX);
                }
                _ => self.idle = POLL_FIRST,
            }
        }
    }

    /// Reads position `next` (known committed) and moves past it; its event if it
    /// changed a watched key.
    async fn examine_next(&mut self) -> Result<Option<WatchEvent>, ClientError> {
        let position = self.next;
        match self
            .client
            .read_log(&self.eg, position, self.source)
            .await?
        {
            LogRead::Committed(entry) => {
                self.next = position.next();
                let changes = changes_in(&self.eg, &entry, position, &self.rows);
                Ok((!changes.is_empty()).then(|| WatchEvent {
                    position,
                    changes: changes.into_iter().map(|c| relative(&self.eg, c)).collect(),
                }))
            }
            LogRead::Truncated { truncated } => Err(ClientError::Collected {
                eg: self.eg.clone(),
                asked: position,
                truncated,
            }),
            LogRead::NotHere | LogRead::Failed(_) => {
                // The replica that served the read is gone and the others do not show
                // the position yet: learn afresh where the log is and who has it.
                self.committed_through = position.prev();
                self.source = None;
                tokio::time::sleep(self.idle).await;
                self.idle = (self.idle * 2).min(POLL_MAX);
                Ok(None)
            }
        }
    }
}

/// A change with its rows named by their keys within the untyped group.
fn relative(eg: &EgId, change: Change) -> Change {
    Change {
        txn: change.txn,
        writes: change
            .writes
            .into_iter()
            .map(|w| match keyspace::untyped_key(&eg.0, &w.row) {
                Some(key) => RowWrite {
                    row: key.to_vec(),
                    cells: w.cells,
                },
                None => w,
            })
            .collect(),
    }
}

/// The changes one committed position made to watched versioned keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEvent {
    /// The position.
    pub position: Position,
    /// The transaction of each change, and each key as it left it (its new version,
    /// and its value, `None` when deleted), in serial order.
    pub changes: Vec<(TxnId, Entry)>,
}

/// A stream of committed changes to a group's versioned keys under a prefix
/// ([`Client::watch_keys`]).
pub struct KeyWatch {
    inner: Watch,
}

impl KeyWatch {
    /// See [`Watch::resume_at`].
    pub fn resume_at(&self) -> Position {
        self.inner.resume_at()
    }

    /// The next position that changed a watched key.
    pub async fn next(&mut self) -> Result<KeyEvent, ClientError> {
        let event = self.inner.next().await?;
        let eg = &self.inner.eg;
        let mut changes = Vec::new();
        for change in event.changes {
            for write in &change.writes {
                changes.push((change.txn, key_entry(eg, write)?));
            }
        }
        Ok(KeyEvent {
            position: event.position,
            changes,
        })
    }
}

/// The versioned key a write of its row leaves behind.
fn key_entry(eg: &EgId, write: &RowWrite) -> Result<Entry, ClientError> {
    let corrupt = |what: &str| ClientError::Corrupt(format!("versioned key row: {what}"));
    let key = key_of_row(eg, &write.row).ok_or_else(|| corrupt("not a key of the group"))?;
    let mut version = None;
    let mut value = None;
    for cell in &write.cells {
        match cell {
            CellWrite::Set { column, value: v } if column == crate::versioned::VERSION => {
                version = Some(parse_version(&key, v)?);
            }
            CellWrite::Set { column, value: v } if column == crate::versioned::VALUE => {
                value = Some(v.clone());
            }
            CellWrite::Delete { column } if column == crate::versioned::VALUE => value = None,
            _ => {}
        }
    }
    Ok(Entry {
        key,
        version: version.ok_or_else(|| corrupt("a write without a version"))?,
        value,
    })
}
