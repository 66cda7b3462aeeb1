//! A global index scan (docs/protocol.md, "Global indexes"): the global index rows of
//! one replica, newest versions, as that replica applied each group.
//!
//! A replica's groups may be spread over several servers (docs/protocol.md,
//! "Placement"), and a server keeps the global index rows of its own groups only. So
//! the scan asks every server that holds the replica's slot in some range, by the
//! placement the client routes by, and merges their answers: each server's first
//! `limit` rows in the scan's order, so the merged first `limit` rows are the first
//! `limit` of them all. If any of those servers does not answer, or refuses, the next
//! candidate replica is asked instead, all its servers again: a page is one replica's.
//!
//! Invariant *scan-asks-every-holder*: with a placement, a scan's answer is made only
//! once every server holding the replica's slot in some range has answered, by a
//! placement no older than any of theirs, and only from a replica that placement keeps
//! in every range (one removed from a range retired its rows there). Each request names the version of the
//! placement it was routed by; a server judging by a newer one refuses
//! (`PlacementNewer`: a move may have given its groups to a server the scan did not
//! ask), and the scan reads the placement from the lock service and asks that
//! replica's servers again.
//!
//! A key two servers both answer (a moved range's rows at the target, and still at the
//! source until it retires them) appears once.

use std::collections::BTreeSet;

use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_placement::{PLACEMENT_FILE, ServerId};
use megastore_rowstore::{KeyRange, Row};
use megastore_types::{ReplicaId, Time};

use super::Ctx;
use super::read::{ReadError, ReadPath, ReadResult};
use crate::messages::{ReplicaError, ReplicaReply, ReplicaRequest};

/// How many times one scan reads the placement after a server said its own is newer
/// (more means the lock service keeps answering an older one than the servers': the
/// refusal then counts as the replica's).
const PLACEMENT_READS_MAX: u32 = 3;

/// One global index scan: the replicas still to try, and the one being asked.
#[derive(Debug)]
pub(crate) struct GlobalScan {
    range: KeyRange,
    limit: Option<usize>,
    reverse: bool,
    /// Replicas able to serve it, best first, not tried yet.
    candidates: Vec<ReplicaId>,
    asking: Option<Asking>,
    /// The placement read under way (its lock request id), and the replica to ask
    /// again once it is read.
    reading_placement: Option<(u64, ReplicaId)>,
    placement_reads: u32,
    /// Why the last replica could not serve.
    last_refusal: Option<ReplicaError>,
    result: Option<Result<ReadResult, ReadError>>,
}

/// The servers of one replica being asked.
#[derive(Debug)]
struct Asking {
    replica: ReplicaId,
    /// Request ids not answered yet.
    waiting: BTreeSet<u64>,
    /// The rows the servers that answered gave.
    rows: Vec<Row>,
    deadline: Time,
}

impl GlobalScan {
    /// `candidates`: replicas able to serve, best first.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        range: KeyRange,
        limit: Option<usize>,
        reverse: bool,
        candidates: Vec<ReplicaId>,
    ) -> Self {
        let mut scan = GlobalScan {
            range,
            limit,
            reverse,
            candidates,
            asking: None,
            reading_placement: None,
            placement_reads: 0,
            last_refusal: None,
            result: None,
        };
        scan.try_next(ctx);
        scan
    }

    fn try_next<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.asking = None;
        if self.candidates.is_empty() {
            let why = match &self.last_refusal {
                Some(error) => format!("no replica served the global index scan (last: {error:?})"),
                None => "no replica served the global index scan".into(),
            };
            self.result = Some(Err(ReadError::Unavailable(why)));
            return;
        }
        let replica = self.candidates.remove(0);
        self.ask(ctx, replica);
    }

    /// Asks every server of `replica`'s slot, by the placement the client routes by —
    /// or passes on to the next candidate if that placement removed the replica from
    /// some range: it keeps none of those groups' rows, and its scan would miss them.
    fn ask<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, replica: ReplicaId) {
        let covers_every_range = ctx
            .placement()
            .is_none_or(|p| p.ranges().iter().all(|r| r.slot(replica).is_some()));
        if !covers_every_range {
            self.try_next(ctx);
            return;
        }
        let routed_by = ctx.placement().map(|p| p.version());
        let mut waiting = BTreeSet::new();
        for server in servers_to_ask(ctx, replica) {
            let (range, limit, reverse) = (self.range.clone(), self.limit, self.reverse);
            waiting.insert(ctx.send_replica(replica, |id| ReplicaRequest::ScanGlobal {
                id,
                range,
                limit,
                reverse,
                server,
                routed_by,
            }));
        }
        self.asking = Some(Asking {
            replica,
            waiting,
            rows: Vec::new(),
            deadline: ctx.now + ctx.config.timeouts.rpc,
        });
    }

    pub(crate) fn result(&self) -> Option<&Result<ReadResult, ReadError>> {
        self.result.as_ref()
    }

    /// When it gives up on the servers asked (`None` while the placement is read: the
    /// lock client times that out).
    pub(crate) fn deadline(&self) -> Option<Time> {
        self.asking.as_ref().map(|a| a.deadline)
    }

    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        reply: ReplicaReply,
    ) {
        let Some(asking) = self.asking.as_mut() else {
            return;
        };
        if !asking.waiting.remove(&reply.id()) {
            return;
        }
        match reply {
            ReplicaReply::Data { rows, .. } => {
                asking.rows.extend(rows);
                if asking.waiting.is_empty() {
                    self.finish();
                }
            }
            ReplicaReply::Error {
                error: ReplicaError::PlacementNewer { .. },
                ..
            } if self.placement_reads < PLACEMENT_READS_MAX => {
                let replica = asking.replica;
                self.asking = None;
                self.placement_reads += 1;
                let read = ctx.send_lock(LockCommand::ReadFile {
                    name: PLACEMENT_FILE.into(),
                });
                self.reading_placement = Some((read, replica));
            }
            ReplicaReply::Error { error, .. } => {
                self.last_refusal = Some(error);
                self.try_next(ctx);
            }
            _ => self.try_next(ctx),
        }
    }

    /// The lock service's answer to lock request `id`: if it is the placement read,
    /// the client routes by what it read (if newer), and the replica is asked again.
    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        let Some((read, replica)) = self.reading_placement else {
            return;
        };
        if read != id {
            return;
        }
        self.reading_placement = None;
        if let Some(placement) = super::placement_read(&result, &ctx.config.topology) {
            ctx.observe_placement(placement);
        }
        self.ask(ctx, replica);
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        if self.asking.as_ref().is_some_and(|a| ctx.now >= a.deadline) {
            self.try_next(ctx);
        }
    }

    /// Every server answered: their rows merged in the scan's order, each key once,
    /// the first `limit`.
    fn finish(&mut self) {
        let Some(asking) = self.asking.take() else {
            return;
        };
        let rows = merged(asking.rows, self.limit, self.reverse);
        self.result = Some(Ok(ReadResult {
            position: None,
            rows,
            replica: asking.replica,
            next_leader: None,
            path: ReadPath::Inconsistent,
            prepared: Vec::new(),
        }));
    }
}

/// The servers of `replica` a scan asks: by the placement the client routes by, every
/// server holding its slot in some range (`None`: the slot's first server, when the
/// client is not placed or the placement gives the replica no slot).
fn servers_to_ask<K: Clone + Ord>(ctx: &Ctx<'_, K>, replica: ReplicaId) -> Vec<Option<ServerId>> {
    let mut servers: Vec<_> = ctx
        .placement()
        .map(|p| p.servers_of_slot(replica).into_iter().map(Some).collect())
        .unwrap_or_default();
    if ctx.config.bugs.scan_first_server_only() {
        servers.truncate(1);
    }
    if servers.is_empty() {
        vec![None]
    } else {
        servers
    }
}

/// `rows` from several servers, each server's in the scan's order: sorted in that
/// order, each key once (the first server's row of it), the first `limit`.
fn merged(mut rows: Vec<Row>, limit: Option<usize>, reverse: bool) -> Vec<Row> {
    if reverse {
        rows.sort_by(|a, b| b.key.cmp(&a.key));
    } else {
        rows.sort_by(|a, b| a.key.cmp(&b.key));
    }
    rows.dedup_by(|later, earlier| later.key == earlier.key);
    if let Some(limit) = limit {
        rows.truncate(limit);
    }
    rows
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use megastore_rowstore::Row;

    use super::merged;

    fn row(key: &[u8], value: &[u8]) -> Row {
        let mut cells = BTreeMap::new();
        cells.insert(
            b"v".to_vec(),
            megastore_rowstore::Cell {
                timestamp: 1,
                value: value.to_vec(),
            },
        );
        Row {
            key: key.to_vec(),
            cells,
        }
    }

    fn keys(rows: &[Row]) -> Vec<&[u8]> {
        rows.iter().map(|r| r.key.as_slice()).collect()
    }

    #[test]
    fn merging_interleaves_servers_in_key_order_and_keeps_the_first_limit() {
        // Server one's first two rows, then server two's.
        let rows = vec![
            row(b"a", b"1"),
            row(b"d", b"1"),
            row(b"b", b"2"),
            row(b"c", b"2"),
        ];
        assert_eq!(
            keys(&merged(rows.clone(), Some(3), false)),
            [b"a", b"b", b"c"]
        );
        assert_eq!(keys(&merged(rows, None, false)), [b"a", b"b", b"c", b"d"]);
    }

    #[test]
    fn merging_in_reverse_keeps_the_largest_keys() {
        let rows = vec![
            row(b"d", b"1"),
            row(b"a", b"1"),
            row(b"c", b"2"),
            row(b"b", b"2"),
        ];
        assert_eq!(keys(&merged(rows, Some(2), true)), [b"d", b"c"]);
    }

    #[test]
    fn a_key_two_servers_hold_appears_once() {
        let rows = vec![row(b"a", b"source"), row(b"b", b"1"), row(b"a", b"target")];
        let rows = merged(rows, None, false);
        assert_eq!(keys(&rows), [b"a", b"b"]);
        assert_eq!(rows[0].cells[b"v".as_slice()].value, b"source");
    }
}
