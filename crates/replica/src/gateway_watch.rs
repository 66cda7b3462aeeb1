//! The public API's `Watch`: a group's committed changes, streamed from the client
//! library's watch ([`megastore_client::Watch`]) as it finds them.

use megastore_client::{Change, KeyWatch, Watch};
use megastore_paxos::{CellWrite, RowWrite};
use megastore_rowstore::KeyRange;
use megastore_rpc::pb::client as pb;
use megastore_rpc::public::{invalid_argument as invalid, txn_id_to_wire};
use megastore_types::{Position, TxnId};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::gateway::{Gateway, status};

/// Messages a watch may have ready before the caller reads them: a slow reader holds
/// the watch back rather than its messages piling up.
const READY_MAX: usize = 16;

/// What a request asks to watch.
enum Watched {
    Range(Watch),
    Keys(KeyWatch),
}

impl Watched {
    async fn next(&mut self) -> Result<pb::WatchResponse, megastore_client::ClientError> {
        Ok(match self {
            Watched::Range(watch) => {
                let event = watch.next().await?;
                response(event.position, event.changes.into_iter().map(range_change))
            }
            Watched::Keys(watch) => {
                let event = watch.next().await?;
                response(
                    event.position,
                    event.changes.into_iter().map(|(txn, entry)| {
                        (
                            txn,
                            pb::WatchChange {
                                txn: None,
                                rows: Vec::new(),
                                entries: vec![crate::gateway::entry_to_wire(entry)],
                            },
                        )
                    }),
                )
            }
        })
    }
}

/// One position's message: the changes in serial order, one per transaction.
fn response(
    position: Position,
    changes: impl Iterator<Item = (TxnId, pb::WatchChange)>,
) -> pb::WatchResponse {
    let mut merged: Vec<(TxnId, pb::WatchChange)> = Vec::new();
    for (txn, change) in changes {
        match merged.last_mut() {
            Some((last, into)) if *last == txn => {
                into.rows.extend(change.rows);
                into.entries.extend(change.entries);
            }
            _ => merged.push((txn, change)),
        }
    }
    pb::WatchResponse {
        position: position.0,
        changes: merged
            .into_iter()
            .map(|(txn, change)| pb::WatchChange {
                txn: Some(txn_id_to_wire(txn, position)),
                ..change
            })
            .collect(),
    }
}

fn range_change(change: Change) -> (TxnId, pb::WatchChange) {
    (
        change.txn,
        pb::WatchChange {
            txn: None,
            rows: change.writes.into_iter().map(row_write_to_wire).collect(),
            entries: Vec::new(),
        },
    )
}

fn row_write_to_wire(write: RowWrite) -> pb::RowWrite {
    use pb::cell_write::Change as Wire;
    pb::RowWrite {
        key: write.row,
        cells: write
            .cells
            .into_iter()
            .map(|cell| match cell {
                CellWrite::Set { column, value } => pb::CellWrite {
                    column,
                    change: Some(Wire::Set(value)),
                },
                CellWrite::Delete { column } => pb::CellWrite {
                    column,
                    change: Some(Wire::Delete(true)),
                },
            })
            .collect(),
    }
}

impl Gateway {
    pub(crate) async fn serve_watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<ReceiverStream<Result<pb::WatchResponse, Status>>>, Status> {
        use pb::watch_request::Keys;
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = crate::gateway::group(&request.eg)?;
        caller.require(
            megastore_access::Access::Read,
            megastore_access::Target::Group(&request.eg),
        )?;
        let from = Position(request.from_position);
        let mut watched = match request.keys {
            Some(Keys::Range(range)) => {
                // The library checks the keys, naming `range.start` and `range.end`.
                let range = KeyRange {
                    start: range.start,
                    end: (!range.end.is_empty()).then_some(range.end),
                };
                Watched::Range(self.client.watch(&eg, &range, from).map_err(status)?)
            }
            Some(Keys::KeyPrefix(prefix)) => {
                Watched::Keys(self.client.watch_keys(&eg, &prefix, from).map_err(status)?)
            }
            None => {
                return Err(invalid(
                    "keys",
                    "give a range of untyped keys or a prefix of versioned keys",
                ));
            }
        };
        let (ready, stream) = tokio::sync::mpsc::channel(READY_MAX);
        let access = std::sync::Arc::clone(&self.access);
        let name = request.eg;
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = watched.next() => next,
                    // The caller hung up while the watch waited for a change.
                    () = ready.closed() => return,
                };
                // Each change goes out only if the caller may still read the group.
                let allowed = access.current(&caller).and_then(|now| {
                    now.require(
                        megastore_access::Access::Read,
                        megastore_access::Target::Group(&name),
                    )
                });
                let next = match allowed {
                    Ok(()) => next.map_err(status),
                    Err(denied) => Err(denied),
                };
                let failed = next.is_err();
                if ready.send(next).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}
