//! Queues between entity groups (docs/protocol.md, "Queues"): a transaction of group A
//! sends a message by writing an *outbox* row of A in its own log entry, so the message
//! exists exactly when the transaction commits. Delivery to the receiver B is a
//! transaction of B that writes B's *inbox* row of the message and B's *mark* of the
//! last message delivered from A — deduplicated by that mark, so a retry, a crash or
//! two deliverers racing never deliver twice — then a transaction of A that deletes the
//! delivered outbox rows. B consumes a message by deleting its inbox row in a
//! transaction that read it: two consumers of one message conflict, so it is consumed
//! at most once.
//!
//! Order: a message's place is (A's position that chose it, its index in the entry:
//! for the `k`-th transaction of a combined entry, `k` × [`INDEXES_PER_TRANSACTION`]
//! plus its index in the transaction).
//! The writer cannot know that position (a commit that loses its position to a
//! non-conflicting writer moves on to the next one), so its outbox row carries a
//! placeholder cell that every replica fills with the position when it applies the
//! entry ([`stamped`]) — deterministic, so every replica's copy and every snapshot
//! agree (cell timestamps would not do: a snapshot install rewrites them). Messages
//! from A to B are delivered in place order, and each delivery continues after B's
//! mark: in order per (sender, receiver) — hence per queue too.
//!
//! This module keeps the keys and the delivery's bookkeeping; [`crate::ClientCore`]
//! runs its reads and commits ([`ClientCore::deliver`](crate::ClientCore::deliver)).

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use megastore_rowstore::{KeyRange, Row};
use megastore_types::reserved::QUEUE_OBJECT;
use megastore_types::{EgId, Position, TxnId};

use crate::bugs::ProtocolBugs;
use crate::entry::{CellWrite, LogEntry, RowWrite};
use crate::messages::DataQuery;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::proposer::read::{ReadError, ReadResult};
use crate::steps::{Ended, Step};
use crate::two_phase::Prepared;

const OUTBOX: u8 = 0x01;
const INBOX: u8 = 0x02;
const MARK: u8 = 0x03;

/// The outbox row's column naming the receiving group.
const TO: &[u8] = b"to";
/// The column of the queue's name (outbox).
const QUEUE: &[u8] = b"queue";
/// The message body's column (outbox and inbox).
pub const BODY: &[u8] = b"body";
/// The mark's column: the last delivered message's place.
const THROUGH: &[u8] = b"through";
/// The outbox row's column holding the position that chose it (filled at apply).
const AT: &[u8] = b"at";
/// When the sender sent it, by the sender's clock (ms since the Unix epoch): in the
/// outbox row and the inbox row, for a backlog's age.
const SENT_MS: &[u8] = b"sent_ms";

/// Messages one delivery delivers at most (the first of the outbox in place order).
pub const DELIVERY_BATCH: usize = 64;

/// A message's place in its sender's log: the position that chose it and its index
/// among the messages that entry sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// The sender's position.
    pub position: Position,
    /// Its index in the entry.
    pub index: u32,
}

impl Place {
    fn encode(self) -> [u8; 12] {
        let mut out = [0; 12];
        out[..8].copy_from_slice(&self.position.0.to_be_bytes());
        out[8..].copy_from_slice(&self.index.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let position = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let index = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?);
        (bytes.len() == 12).then_some(Self {
            position: Position(position),
            index,
        })
    }
}

fn queue_prefix(eg: &EgId, kind: u8) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.extend_from_slice(&QUEUE_OBJECT);
    row.push(kind);
    row
}

/// A length-prefixed field: self-delimiting, so one field never runs into the next.
fn push_field(row: &mut Vec<u8>, field: &[u8]) {
    let len = u16::try_from(field.len()).expect("a queue name or group fits in 64 KiB");
    row.extend_from_slice(&len.to_be_bytes());
    row.extend_from_slice(field);
}

fn take_field<'r>(rest: &mut &'r [u8]) -> Option<&'r [u8]> {
    let len = usize::from(u16::from_be_bytes(rest.get(..2)?.try_into().ok()?));
    let field = rest.get(2..2 + len)?;
    *rest = &rest[2 + len..];
    Some(field)
}

/// Every outbox row of `eg`.
pub fn outbox_range(eg: &EgId) -> KeyRange {
    KeyRange::prefix(queue_prefix(eg, OUTBOX))
}

/// Every inbox row of `eg` for `queue`, in delivery order per sender.
pub fn inbox_range(eg: &EgId, queue: &str) -> KeyRange {
    let mut prefix = queue_prefix(eg, INBOX);
    push_field(&mut prefix, queue.as_bytes());
    KeyRange::prefix(prefix)
}

/// The row of `receiver` marking the last message delivered to it from `sender`.
pub fn mark_row(receiver: &EgId, sender: &EgId) -> Vec<u8> {
    let mut row = queue_prefix(receiver, MARK);
    row.extend_from_slice(&sender.0);
    row
}

/// The inbox row of `receiver` holding the message of `sender` at `place`.
pub fn inbox_row(receiver: &EgId, queue: &str, sender: &EgId, place: Place) -> Vec<u8> {
    let mut row = inbox_range(receiver, queue).start;
    push_field(&mut row, &sender.0);
    row.extend_from_slice(&place.encode());
    row
}

/// An inbox row's sender and place, if `row` is an inbox row of `receiver`.
pub fn parse_inbox_row(receiver: &EgId, row: &[u8]) -> Option<(String, EgId, Place)> {
    let mut rest = row.strip_prefix(queue_prefix(receiver, INBOX).as_slice())?;
    let queue = String::from_utf8(take_field(&mut rest)?.to_vec()).ok()?;
    let sender = EgId(take_field(&mut rest)?.to_vec());
    Some((queue, sender, Place::decode(rest)?))
}

/// The outbox write that sends `body` to `queue` of `to`: the `index`-th message of
/// transaction `txn` of `from` (the index orders the messages of one transaction),
/// sent at `sent_ms` by the sender's clock (for the backlog's age only).
pub fn send_write(
    from: &EgId,
    txn: TxnId,
    index: u32,
    to: &EgId,
    queue: &str,
    body: &[u8],
    sent_ms: u64,
) -> RowWrite {
    let mut row = queue_prefix(from, OUTBOX);
    row.extend_from_slice(&txn.client.0.to_be_bytes());
    row.extend_from_slice(&txn.seq.to_be_bytes());
    row.extend_from_slice(&index.to_be_bytes());
    let set = |column: &[u8], value: &[u8]| CellWrite::Set {
        column: column.to_vec(),
        value: value.to_vec(),
    };
    RowWrite {
        row,
        cells: vec![
            set(TO, &to.0),
            set(QUEUE, queue.as_bytes()),
            set(BODY, body),
            set(SENT_MS, &sent_ms.to_be_bytes()),
            // Filled with the position that chose it, at apply.
            set(AT, &[]),
        ],
    }
}

/// How far apart the place indexes of two transactions combined into one entry are:
/// the message indexes of one transaction stay below it (a transaction within
/// [`TRANSACTION_BYTES_MAX`](megastore_types::limits::TRANSACTION_BYTES_MAX) sends far
/// fewer messages).
pub const INDEXES_PER_TRANSACTION: u32 = 1 << 24;

/// `entry`'s writes (of `eg`, chosen at `position`) as the replicas apply them, in
/// order ([`stamped`], each transaction of a combined entry by its ordinal).
pub fn stamped_entry<'e>(
    eg: &EgId,
    entry: &'e LogEntry,
    position: Position,
) -> Vec<Cow<'e, RowWrite>> {
    entry
        .transactions()
        .into_iter()
        .enumerate()
        .flat_map(|(ordinal, (_, writes))| {
            let ordinal = u32::try_from(ordinal).expect("an entry combines few transactions");
            writes
                .iter()
                .map(move |w| stamped(eg, w, position, ordinal))
        })
        .collect()
}

/// `write` (of the `ordinal`-th transaction of `eg`'s entry chosen at `position`) as
/// the replicas apply it: an outbox row gets the position in its placeholder cell —
/// followed by the ordinal past an entry's first transaction, so that two combined
/// transactions' messages get distinct places, in their serial order — and every
/// other write is unchanged.
pub fn stamped<'w>(
    eg: &EgId,
    write: &'w RowWrite,
    position: Position,
    ordinal: u32,
) -> Cow<'w, RowWrite> {
    let is_send = outbox_range(eg).contains(&write.row)
        && write
            .cells
            .iter()
            .any(|c| matches!(c, CellWrite::Set { column, .. } if column == AT));
    if !is_send {
        return Cow::Borrowed(write);
    }
    let mut at = position.0.to_be_bytes().to_vec();
    if ordinal > 0 {
        at.extend_from_slice(&ordinal.to_be_bytes());
    }
    let cells = write
        .cells
        .iter()
        .map(|c| match c {
            CellWrite::Set { column, .. } if column == AT => CellWrite::Set {
                column: AT.to_vec(),
                value: at.clone(),
            },
            other => other.clone(),
        })
        .collect();
    Cow::Owned(RowWrite {
        row: write.row.clone(),
        cells,
    })
}

/// A message delivered to a receiver's inbox, as a consumer read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Its inbox row (deleted when consumed).
    pub row: Vec<u8>,
    /// Its queue.
    pub queue: String,
    /// Who sent it.
    pub sender: EgId,
    /// Its place in the sender's log.
    pub place: Place,
    /// Its body.
    pub body: Vec<u8>,
    /// When it was sent, by the sender's clock (ms since the Unix epoch; 0 unknown).
    pub sent_ms: u64,
}

/// The message an inbox row of `receiver` holds, if `row` is one.
pub fn incoming(receiver: &EgId, row: &Row) -> Option<Incoming> {
    let (queue, sender, place) = parse_inbox_row(receiver, &row.key)?;
    Some(Incoming {
        row: row.key.clone(),
        queue,
        sender,
        place,
        body: row.value(BODY)?.to_vec(),
        sent_ms: sent_ms_of(row),
    })
}

/// How a transaction of the receiver consumes `messages` it read: the deletes of their
/// inbox rows, and the rows to declare read — the same rows, so that two transactions
/// consuming one message conflict and only one commits (consumed at most once).
pub fn consume(messages: &[Incoming], bugs: &ProtocolBugs) -> (Vec<RowWrite>, Vec<Vec<u8>>) {
    let deletes = messages
        .iter()
        .map(|m| RowWrite {
            row: m.row.clone(),
            cells: [BODY, SENT_MS]
                .map(|column| CellWrite::Delete {
                    column: column.to_vec(),
                })
                .to_vec(),
        })
        .collect();
    let reads = if bugs.consume_outside_txn() {
        Vec::new()
    } else {
        messages.iter().map(|m| m.row.clone()).collect()
    };
    (deletes, reads)
}

/// A sent message, as a deliverer read it from its sender's outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Its outbox row (deleted once delivered).
    pub row: Vec<u8>,
    /// Where it goes.
    pub to: EgId,
    /// Which queue.
    pub queue: String,
    /// Its body.
    pub body: Vec<u8>,
    /// Its place in the sender's log.
    pub place: Place,
    /// When it was sent, by the sender's clock (ms since the Unix epoch; 0 unknown).
    pub sent_ms: u64,
}

/// The message an outbox row of `eg` holds, as applied ([`stamped`]), if `row` is one.
pub fn outgoing(eg: &EgId, row: &Row) -> Option<Outgoing> {
    let rest = row.key.strip_prefix(queue_prefix(eg, OUTBOX).as_slice())?;
    // After the sender transaction's client (4 bytes) and sequence number (8).
    let index = u32::from_be_bytes(rest.get(12..16)?.try_into().ok()?);
    // The position, and past a combined entry's first transaction its ordinal.
    let stamp = row.value(AT)?;
    let at = u64::from_be_bytes(stamp.get(..8)?.try_into().ok()?);
    let ordinal = match stamp.get(8..) {
        Some([]) => 0,
        Some(rest) => u32::from_be_bytes(rest.try_into().ok()?),
        None => return None,
    };
    if index >= INDEXES_PER_TRANSACTION {
        return None;
    }
    let index = ordinal.checked_mul(INDEXES_PER_TRANSACTION)? + index;
    // A receiver and queue name the inbox key can hold (length-prefixed fields); any
    // other row is not a message this protocol wrote, and is left alone.
    let (to, queue) = (row.value(TO)?, row.value(QUEUE)?);
    if to.is_empty() || to.len() > usize::from(u16::MAX) || queue.len() > usize::from(u16::MAX) {
        return None;
    }
    Some(Outgoing {
        row: row.key.clone(),
        to: EgId(to.to_vec()),
        queue: String::from_utf8(queue.to_vec()).ok()?,
        body: row.value(BODY)?.to_vec(),
        place: Place {
            position: Position(at),
            index,
        },
        sent_ms: sent_ms_of(row),
    })
}

fn sent_ms_of(row: &Row) -> u64 {
    row.value(SENT_MS)
        .and_then(|v| v.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// Every queue row of `eg`: its outbox, inbox and marks.
pub fn queue_range(eg: &EgId) -> KeyRange {
    let mut prefix = eg.0.clone();
    prefix.extend_from_slice(&QUEUE_OBJECT);
    KeyRange::prefix(prefix)
}

/// How many messages wait, and since when (the oldest's send time, by its sender's
/// clock, ms since the Unix epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Messages waiting.
    pub messages: u64,
    /// The oldest one's send time (`None`: none waits, or its time is unknown).
    pub oldest_sent_ms: Option<u64>,
}

impl Depth {
    fn add(&mut self, sent_ms: u64) {
        self.messages += 1;
        if sent_ms > 0 {
            self.oldest_sent_ms = Some(self.oldest_sent_ms.map_or(sent_ms, |o| o.min(sent_ms)));
        }
    }
}

/// A group's queue backlog: per queue, the messages delivered to it and not yet
/// consumed; and the messages it sent that are not yet delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Per queue name, its inbox.
    pub inbox: BTreeMap<String, Depth>,
    /// Its outbox.
    pub outbox: Depth,
}

/// The backlog `rows` (of `eg`'s [`queue_range`]) show.
pub fn backlog(eg: &EgId, rows: &[Row]) -> Backlog {
    let mut backlog = Backlog::default();
    for row in rows {
        if let Some(message) = outgoing(eg, row) {
            backlog.outbox.add(message.sent_ms);
        } else if let Some(message) = incoming(eg, row) {
            backlog
                .inbox
                .entry(message.queue)
                .or_default()
                .add(message.sent_ms);
        }
    }
    backlog
}

/// What a delivery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    /// The sender's position its outbox was read at.
    pub read_at: Option<Position>,
    /// Messages committed into receivers' inboxes by this delivery.
    pub delivered: u64,
    /// Messages its receivers had already (another deliverer's, or an earlier try's).
    pub already: u64,
    /// Receivers it could not deliver to this time (a conflict with another
    /// deliverer, or an unknown outcome): their messages stay in the outbox.
    pub skipped: Vec<EgId>,
    /// Whether the outbox held more than one batch.
    pub more: bool,
}

#[derive(Debug)]
enum Stage {
    ReadOutbox,
    ReadMark { receiver: EgId },
    CommitInbox { receiver: EgId, count: u64 },
    Trim,
    Done,
}

/// One delivery of a sender's outbox.
#[derive(Debug)]
pub(crate) struct Deliver {
    sender: EgId,
    stage: Stage,
    /// The outbox read: its position, next leader and the prepared transactions it
    /// found, for the trim's commit.
    outbox_read: Option<(Position, Option<megastore_types::ReplicaId>, Vec<Prepared>)>,
    /// The messages read, per receiver, in place order; receivers not yet handled.
    waiting: VecDeque<(EgId, Vec<Outgoing>)>,
    /// The outbox rows to delete: delivered now or before.
    trim: Vec<Vec<u8>>,
    done: Delivery,
    failed: Option<ReadError>,
    /// Messages it delivers at most.
    batch: usize,
    bugs: ProtocolBugs,
}

impl Deliver {
    /// A delivery of `sender`'s outbox, and its first step.
    pub(crate) fn start(sender: EgId, batch: usize, bugs: ProtocolBugs) -> (Self, Step) {
        let read = Step::Read {
            eg: sender.clone(),
            settle: true,
            query: DataQuery::Scan {
                // All of it: outbox rows sort by their transaction, not by their
                // place, and a batch must be the first messages *in place order* —
                // a later one delivered first would move the mark past an earlier one,
                // which would then pass for delivered.
                range: outbox_range(&sender),
                limit: None,
                reverse: false,
            },
        };
        let deliver = Self {
            sender,
            stage: Stage::ReadOutbox,
            outbox_read: None,
            waiting: VecDeque::new(),
            trim: Vec::new(),
            done: Delivery::default(),
            failed: None,
            batch: batch.max(1),
            bugs,
        };
        (deliver, read)
    }

    /// A step it asked for ended: its next step, if any.
    pub(crate) fn on_ended(&mut self, ended: Ended) -> Option<Step> {
        match ended {
            Ended::Read(read) => self.on_read(read),
            Ended::Commit(result) => self.on_commit(&result),
            Ended::Resolve(_) | Ended::Woke => None,
        }
    }

    /// A read it asked for finished: its next step, if any.
    pub(crate) fn on_read(&mut self, result: Result<ReadResult, ReadError>) -> Option<Step> {
        let read = match result {
            Ok(read) => read,
            Err(e) => {
                self.failed = Some(e);
                self.stage = Stage::Done;
                return None;
            }
        };
        let position = read.position.expect("a current read names its position");
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::ReadOutbox => {
                self.outbox_read = Some((position, read.next_leader, read.prepared.clone()));
                self.done.read_at = Some(position);
                let mut sent: Vec<Outgoing> = read
                    .rows
                    .iter()
                    .filter_map(|r| outgoing(&self.sender, r))
                    .collect();
                if !self.bugs.batch_in_row_order() {
                    sent.sort_by_key(|m| m.place);
                }
                self.done.more = sent.len() > self.batch;
                sent.truncate(self.batch);
                sent.sort_by_key(|m| m.place);
                let mut by_receiver: BTreeMap<EgId, Vec<Outgoing>> = BTreeMap::new();
                for message in sent {
                    by_receiver
                        .entry(message.to.clone())
                        .or_default()
                        .push(message);
                }
                self.waiting = by_receiver.into_iter().collect();
                self.next_receiver()
            }
            Stage::ReadMark { receiver } => {
                let mark = read
                    .rows
                    .iter()
                    .find(|r| r.key == mark_row(&receiver, &self.sender))
                    .and_then(|r| r.value(THROUGH))
                    .and_then(Place::decode);
                let messages = &self
                    .waiting
                    .front()
                    .expect("the receiver being delivered to is first")
                    .1;
                let pending: Vec<&Outgoing> = messages
                    .iter()
                    .filter(|m| {
                        self.bugs.deliver_without_dedup() || mark.is_none_or(|at| m.place > at)
                    })
                    .collect();
                let Some(last) = pending.last() else {
                    // All there already: only the outbox is left to trim.
                    self.done.already += messages.len() as u64;
                    self.receiver_done(true);
                    return self.next_receiver();
                };
                self.done.already += (messages.len() - pending.len()) as u64;
                let mut writes: Vec<RowWrite> = pending
                    .iter()
                    .map(|m| RowWrite {
                        row: inbox_row(&receiver, &m.queue, &self.sender, m.place),
                        cells: vec![
                            CellWrite::Set {
                                column: BODY.to_vec(),
                                value: m.body.clone(),
                            },
                            CellWrite::Set {
                                column: SENT_MS.to_vec(),
                                value: m.sent_ms.to_be_bytes().to_vec(),
                            },
                        ],
                    })
                    .collect();
                let mark = mark_row(&receiver, &self.sender);
                writes.push(RowWrite {
                    row: mark.clone(),
                    cells: vec![CellWrite::Set {
                        column: THROUGH.to_vec(),
                        value: last.place.encode().to_vec(),
                    }],
                });
                let count = pending.len() as u64;
                self.stage = Stage::CommitInbox {
                    receiver: receiver.clone(),
                    count,
                };
                // The mark: a deliverer racing this one conflicts on it.
                let mut reads = ReadSet::from(std::collections::BTreeSet::from([mark]));
                reads.saw_prepared(&read.prepared);
                Some(Step::Commit {
                    eg: receiver,
                    read_position: position,
                    leader: read.next_leader,
                    writes,
                    reads,
                    txn: None,
                })
            }
            other => {
                self.stage = other;
                None
            }
        }
    }

    /// A commit it asked for finished: its next step, if any.
    pub(crate) fn on_commit(&mut self, result: &CommitResult) -> Option<Step> {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::CommitInbox { receiver, count } => {
                let committed = matches!(result, CommitResult::Committed { .. });
                if committed {
                    self.done.delivered += count;
                } else {
                    self.done.skipped.push(receiver);
                }
                self.receiver_done(committed);
                self.next_receiver()
            }
            // The trim's outcome changes nothing: an outbox row left behind is
            // delivered again as a duplicate the mark refuses, then trimmed.
            Stage::Trim => None,
            other => {
                self.stage = other;
                None
            }
        }
    }

    /// The receiver first in line is handled; its messages are trimmed if it has them.
    fn receiver_done(&mut self, delivered: bool) {
        let (_, messages) = self.waiting.pop_front().expect("a receiver was in line");
        if delivered {
            self.trim.extend(messages.into_iter().map(|m| m.row));
        }
    }

    /// Reads the next receiver's mark, or trims the outbox once none is left.
    fn next_receiver(&mut self) -> Option<Step> {
        if let Some((receiver, _)) = self.waiting.front() {
            let receiver = receiver.clone();
            let mark = mark_row(&receiver, &self.sender);
            self.stage = Stage::ReadMark {
                receiver: receiver.clone(),
            };
            return Some(Step::Read {
                eg: receiver,
                query: DataQuery::Rows(vec![mark]),
                settle: true,
            });
        }
        let (position, leader, prepared) = self.outbox_read.clone()?;
        if self.trim.is_empty() {
            self.stage = Stage::Done;
            return None;
        }
        self.stage = Stage::Trim;
        let writes = std::mem::take(&mut self.trim)
            .into_iter()
            .map(|row| RowWrite {
                row,
                cells: [TO, QUEUE, BODY, SENT_MS, AT]
                    .map(|column| CellWrite::Delete {
                        column: column.to_vec(),
                    })
                    .to_vec(),
            })
            .collect();
        // Blind deletes: nobody else writes a delivered message's outbox row but
        // another deliverer deleting it too, which is harmless.
        let mut reads = ReadSet::default();
        reads.saw_prepared(&prepared);
        Some(Step::Commit {
            eg: self.sender.clone(),
            read_position: position,
            leader,
            writes,
            reads,
            txn: None,
        })
    }

    /// What it did, once it is done.
    pub(crate) fn result(&self) -> Option<Result<Delivery, ReadError>> {
        if !matches!(self.stage, Stage::Done) {
            return None;
        }
        Some(match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(self.done.clone()),
        })
    }
}

#[cfg(test)]
mod tests;
