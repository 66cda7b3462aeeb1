//! The coordinator messages on the wire.

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_types::{EgId, Epoch, Position};

use crate::error::{WireError, required};
use crate::pb::coordinator as pb;

impl From<CoordinatorRequest> for pb::CoordinatorRequest {
    fn from(request: CoordinatorRequest) -> Self {
        use pb::coordinator_request as r;
        let request = match request {
            CoordinatorRequest::Query { id, eg } => r::Request::Query(r::Query { id, eg: eg.0 }),
            CoordinatorRequest::Validate {
                eg,
                position,
                epoch,
            } => r::Request::Validate(r::Validate {
                eg: eg.0,
                position: position.0,
                epoch: epoch.0,
            }),
            CoordinatorRequest::Invalidate { id, eg, position } => {
                r::Request::Invalidate(r::Invalidate {
                    id,
                    eg: eg.0,
                    position: position.0,
                })
            }
        };
        pb::CoordinatorRequest {
            request: Some(request),
        }
    }
}

impl TryFrom<pb::CoordinatorRequest> for CoordinatorRequest {
    type Error = WireError;

    fn try_from(request: pb::CoordinatorRequest) -> Result<Self, WireError> {
        use pb::coordinator_request as r;
        Ok(match required(request.request, "request")? {
            r::Request::Query(q) => CoordinatorRequest::Query {
                id: q.id,
                eg: EgId(q.eg),
            },
            r::Request::Validate(v) => CoordinatorRequest::Validate {
                eg: EgId(v.eg),
                position: Position(v.position),
                epoch: Epoch(v.epoch),
            },
            r::Request::Invalidate(i) => CoordinatorRequest::Invalidate {
                id: i.id,
                eg: EgId(i.eg),
                position: Position(i.position),
            },
        })
    }
}

/// A coordinator's answer on the wire (`None`: it had nothing to say, as for a
/// validate).
pub fn reply_to_wire(reply: Option<CoordinatorReply>) -> pb::CoordinatorReply {
    use pb::coordinator_reply as r;
    let reply = match reply {
        Some(CoordinatorReply::Query {
            id,
            vouched,
            epoch,
            retired,
        }) => r::Reply::Query(r::Query {
            id,
            vouched,
            epoch: epoch.map(|e| e.0),
            retired,
        }),
        Some(CoordinatorReply::Invalidated { id }) => r::Reply::Invalidated(r::Invalidated { id }),
        Some(CoordinatorReply::NotServed { id }) => r::Reply::NotServed(r::NotServed { id }),
        None => r::Reply::None(r::None {}),
    };
    pb::CoordinatorReply { reply: Some(reply) }
}

/// A coordinator's answer from the wire.
pub fn reply_from_wire(reply: pb::CoordinatorReply) -> Result<Option<CoordinatorReply>, WireError> {
    use pb::coordinator_reply as r;
    Ok(match required(reply.reply, "reply")? {
        r::Reply::Query(q) => Some(CoordinatorReply::Query {
            id: q.id,
            vouched: q.vouched,
            epoch: q.epoch.map(Epoch),
            retired: q.retired,
        }),
        r::Reply::Invalidated(i) => Some(CoordinatorReply::Invalidated { id: i.id }),
        r::Reply::NotServed(n) => Some(CoordinatorReply::NotServed { id: n.id }),
        r::Reply::None(_) => None,
    })
}
