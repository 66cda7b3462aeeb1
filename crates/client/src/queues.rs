//! Queues between entity groups, in the client library (docs/client-api.md, "Queues";
//! the protocol is `megastore_paxos::queue`): a transaction sends messages that exist
//! exactly when it commits, a delivery moves them into their receivers' inboxes exactly
//! once and in order, and a transaction of the receiver consumes them atomically with
//! its other writes.

use megastore_paxos::queue::{self, Delivery, Incoming};
use megastore_types::EgId;

use crate::client::{Client, ClientError};
use crate::txn::Transaction;

/// The longest queue name.
pub const QUEUE_NAME_BYTES_MAX: usize = 256;

fn check_queue(name: &str) -> Result<(), ClientError> {
    if name.is_empty() || name.len() > QUEUE_NAME_BYTES_MAX {
        return Err(ClientError::InvalidArgument(format!(
            "queue: a name of 1 to {QUEUE_NAME_BYTES_MAX} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

/// A message consumed from a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The group that sent it.
    pub sender: EgId,
    /// The sender's log position that committed it.
    pub sent_at: megastore_types::Position,
    /// Its index among the messages that transaction sent.
    pub index: u32,
    /// Its body.
    pub body: Vec<u8>,
}

impl Transaction {
    /// Sends `body` to `queue` of group `to` (any group, this one included): the
    /// message exists exactly when this transaction commits, and is then delivered
    /// asynchronously, exactly once, after every message this group sent `to` before
    /// it (by the replicas' deliveries, or [`Client::deliver`]).
    pub fn send(&mut self, to: &EgId, queue: &str, body: &[u8]) -> Result<(), ClientError> {
        check_queue(queue)?;
        if to.0.is_empty() {
            return Err(ClientError::InvalidArgument("to: name a group".into()));
        }
        let index = self.next_send();
        let sent_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let write = queue::send_write(self.eg(), self.id(), index, to, queue, body, sent_ms);
        for cell in write.cells {
            if let megastore_paxos::CellWrite::Set { column, value } = cell {
                self.set_row(&write.row, &column, &value);
            }
        }
        Ok(())
    }

    /// Consumes up to `limit` messages of this group's `queue` (in order per sender),
    /// read at the transaction's position: they are gone once the transaction commits
    /// — and still there if it does not. Two transactions consuming one message
    /// conflict, so each message is consumed at most once.
    pub async fn receive(
        &mut self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<Message>, ClientError> {
        check_queue(queue)?;
        let eg = self.eg().clone();
        let rows = self
            .scan_rows(queue::inbox_range(&eg, queue), Some(limit), false)
            .await?;
        let messages: Vec<Incoming> = rows
            .iter()
            .filter_map(|r| queue::incoming(&eg, r))
            .collect();
        let (deletes, reads) = queue::consume(&messages, &megastore_paxos::ProtocolBugs::NONE);
        self.declare_read(reads);
        for delete in deletes {
            for cell in delete.cells {
                self.delete_row(&delete.row, cell.column());
            }
        }
        Ok(messages
            .into_iter()
            .map(|m| Message {
                sender: m.sender,
                sent_at: m.place.position,
                index: m.place.index,
                body: m.body,
            })
            .collect())
    }
}

impl Client {
    /// Delivers the messages in `sender`'s outbox into their receivers' inboxes (a
    /// batch of up to [`queue::DELIVERY_BATCH`]), exactly once each and in order, then
    /// trims what was delivered. The replicas deliver by themselves; this is for a
    /// program that wants its messages delivered now. Safe to run while others deliver.
    pub async fn deliver(&self, sender: &EgId) -> Result<Delivery, ClientError> {
        self.deliver_outbox(sender.clone()).await
    }
}
