//! The public API's queues: sending and receiving inside a transaction, and a
//! delivery on request. Requests become library calls here.

use megastore_rpc::pb::client as pb;
use megastore_rpc::public::invalid_argument as invalid;
use tonic::{Request, Response, Status};

use crate::gateway::{Gateway, status};
use crate::gateway_access::Tables;
use crate::gateway_sessions::{open, open_to_write};
use megastore_access::Access;

/// Messages one `Receive` takes when not told.
const RECEIVE_DEFAULT: usize = 100;
/// Messages one `Receive` takes at most.
const RECEIVE_MAX: u32 = 10_000;

impl Gateway {
    pub(crate) async fn serve_send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let to = self
            .group_named(("to", "to_root"), request.to, request.to_root)
            .await?;
        // A send writes the sender's outbox and, once delivered, the receiver's queue.
        self.require_group(&caller, Access::Write, &to, Tables::Root)
            .await?;
        let receiver = self.written_group(&caller, &to).await?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let from = open(&mut guard)?.eg().clone();
        self.require_group(&caller, Access::Write, &from, Tables::Root)
            .await?;
        let sender = self.written_group(&caller, &from).await?;
        open_to_write(&mut guard, receiver)?;
        let txn = open_to_write(&mut guard, sender)?;
        txn.send(&to, &request.queue, &request.body)
            .map_err(status)?;
        Ok(Response::new(pb::SendMessageResponse {}))
    }

    pub(crate) async fn serve_receive(
        &self,
        request: Request<pb::ReceiveRequest>,
    ) -> Result<Response<pb::ReceiveResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let limit = match request.limit {
            0 => RECEIVE_DEFAULT,
            n if n <= RECEIVE_MAX => n as usize,
            n => {
                return Err(invalid(
                    "limit",
                    format!("at most {RECEIVE_MAX} messages at once, not {n}"),
                ));
            }
        };
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let eg = open(&mut guard)?.eg().clone();
        // Receiving consumes: it writes the group's queue.
        self.require_group(&caller, Access::Write, &eg, Tables::Root)
            .await?;
        let written = self.written_group(&caller, &eg).await?;
        let txn = open_to_write(&mut guard, written)?;
        let messages = txn
            .receive(&request.queue, limit)
            .await
            .map_err(status)?
            .into_iter()
            .map(|m| pb::QueueMessage {
                sender_name: megastore_client::group_name(&m.sender).unwrap_or_default(),
                sender: m.sender.0,
                sent_at: m.sent_at.0,
                index: m.index,
                body: m.body,
            })
            .collect();
        Ok(Response::new(pb::ReceiveResponse { messages }))
    }

    pub(crate) async fn serve_deliver(
        &self,
        request: Request<pb::DeliverRequest>,
    ) -> Result<Response<pb::DeliverResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let sender = self
            .group_named(
                ("sender", "sender_root"),
                request.sender,
                request.sender_root,
            )
            .await?;
        self.require_group(&caller, Access::Write, &sender, Tables::Root)
            .await?;
        let done = self.client.deliver(&sender).await.map_err(status)?;
        Ok(Response::new(pb::DeliverResponse {
            delivered: done.delivered,
            already: done.already,
            skipped: done.skipped.into_iter().map(|g| g.0).collect(),
            more: done.more,
        }))
    }
}
