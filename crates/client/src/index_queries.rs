//! Queries across entity groups: global index scans (as applied, or verified against
//! each hit's entity), merge-joins of several global index scans, and parallel entity
//! lookups — the paper's "outer join" recipe is a scan followed by a lookup of its hits.
//!
//! A global index scan reads one replica's applied state of every group
//! (docs/protocol.md, "Global indexes"); a scan of several pages or a join may read
//! each page from a different replica, each page consistent per group.

use futures::StreamExt;
use megastore_paxos::{GlobalHit, ReadMode};
use megastore_rowstore::{KeyRange, Row};
use megastore_schema::{Catalog, IndexEntry, IndexKind, IndexQuery, PageToken, Value};
use megastore_types::{EgId, ReplicaId};

use crate::client::{Client, ClientError};
use crate::entities::{EntityRead, entity_group};

fn schema(e: megastore_schema::EntityError) -> ClientError {
    ClientError::Schema(e.to_string())
}

/// How many groups a verified scan, or entities a lookup, reads at once, unless told.
pub const LOOKUPS_IN_FLIGHT: usize = 32;

/// How many entries a merge-join reads from one index at a time.
const JOIN_PAGE: usize = 64;

/// How a global index scan treats what the replica it reads has applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexRead {
    /// The entries as the replica has applied them: one read, possibly stale hits.
    AsApplied,
    /// Each hit checked by a current read of its entity's group: no stale hit.
    Verified,
}

/// One page of a global index scan, and where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalIndexScan {
    /// The entries, in the query's order.
    pub entries: Vec<IndexEntry>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<PageToken>,
    /// The replica that served it (its applied positions are what the page reflects).
    pub replica: ReplicaId,
}

/// An entity every index of a merge-join has an entry for.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinHit {
    /// The entity's primary key.
    pub primary_key: Vec<Value>,
    /// Its entry in each query's index, in the order of the queries.
    pub entries: Vec<IndexEntry>,
}

/// One page of a merge-join.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinedScan {
    /// The hits, in primary key order.
    pub hits: Vec<JoinHit>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<PageToken>,
}

impl Client {
    /// One page of a global index query (`query`: equal leading values, a range on the
    /// next column, reverse, a limit, a page token; docs/client-api.md), across every
    /// entity group, from the nearest full or read-only replica that answers.
    ///
    /// Consistency, [`IndexRead::AsApplied`]: what that replica has applied of each
    /// group — a group's entries are never half of one transaction's, but a write
    /// acknowledged elsewhere may not show yet, and an entry may name an entity
    /// changed since (the paper's "global index scans may miss recent updates";
    /// docs/protocol.md, "Global indexes"). [`IndexRead::Verified`] checks each hit
    /// by a current read of its entity's group — of the group's copy of its entries,
    /// which the entity's writes keep (the protocol core's verification, in parallel,
    /// a bounded number of groups at once) — and drops the entries the group no
    /// longer has as found: no hit is then stale, though one written after the scan's
    /// replica applied may still be missing, and a page may hold fewer entries than
    /// the limit while more pages follow.
    pub async fn scan_global_index(
        &self,
        catalog: &Catalog,
        query: &IndexQuery,
        read: IndexRead,
    ) -> Result<GlobalIndexScan, ClientError> {
        let (index, range) = global_query_rows(catalog, query)?;
        let scanned = self
            .scan_global_rows(range, query.rows_asked(), query.reverse)
            .await?;
        let (rows, next) = query.page_of(scanned.rows);
        let mut entries = entries_of(catalog, rows)?;
        if read == IndexRead::Verified {
            let table = table_of(catalog, index)?;
            let hits = entries
                .iter()
                .map(|(row, entry)| global_hit(catalog, table, row, entry))
                .collect::<Result<_, _>>()?;
            let checked = self.verify_hits(hits, LOOKUPS_IN_FLIGHT).await?;
            entries = entries
                .into_iter()
                .zip(checked)
                .filter(|(_, check)| check.current)
                .map(|(entry, _)| entry)
                .collect();
        }
        Ok(GlobalIndexScan {
            entries: entries.into_iter().map(|(_, entry)| entry).collect(),
            next,
            replica: scanned.replica,
        })
    }

    /// The entities every one of `queries` finds: a merge-join of global index scans
    /// that share an order. Each query gives a value for every column of its index
    /// (no range, no reverse, no page), and all index one table, so each scan runs in
    /// primary key order; the join skips ahead in each index to the largest key the
    /// others reached (a zig-zag join: it reads about as many entries as the rarest
    /// value has, not as the commonest). At most `limit` hits, after the page that
    /// ended with `after`; with [`IndexRead::Verified`], each hit is checked by a
    /// current read of its group and kept only if the entity still has every entry.
    pub async fn merge_join(
        &self,
        catalog: &Catalog,
        queries: &[IndexQuery],
        limit: Option<usize>,
        after: Option<&PageToken>,
        read: IndexRead,
    ) -> Result<JoinedScan, ClientError> {
        let table = join_table(catalog, queries)?;
        let (joined, next) = zig_zag(self, catalog, queries, limit, after).await?;
        let hits = match read {
            IndexRead::AsApplied => joined.into_iter().map(|j| j.hit).collect(),
            IndexRead::Verified => self.still_joined(catalog, table, joined).await?,
        };
        Ok(JoinedScan { hits, next })
    }

    /// Reads entities of `table` by primary key, at most `in_flight` at once (each from
    /// its own group, in `mode`), in the order of `keys`: the lookup half of the outer
    /// join recipe, after a global index scan.
    pub async fn read_entities(
        &self,
        catalog: &Catalog,
        mode: ReadMode,
        table: &str,
        keys: &[Vec<Value>],
        in_flight: usize,
    ) -> Result<Vec<EntityRead>, ClientError> {
        catalog.require_table(table).map_err(schema)?;
        // Collected first: a stream over a closure of borrowed keys is not `Send` for
        // every lifetime, which a gRPC handler needs.
        let reads: Vec<_> = keys
            .iter()
            .map(|key| self.read_entity(catalog, mode, table, key))
            .collect();
        futures::stream::iter(reads)
            .buffered(in_flight.max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    /// The hits whose group, read now, still has each of their entries.
    async fn still_joined(
        &self,
        catalog: &Catalog,
        table: &str,
        joined: Vec<Joined>,
    ) -> Result<Vec<JoinHit>, ClientError> {
        let mut hits = Vec::new();
        for j in &joined {
            for (row, entry) in j.rows.iter().zip(&j.hit.entries) {
                hits.push(global_hit(catalog, table, row, entry)?);
            }
        }
        let mut checked = self.verify_hits(hits, LOOKUPS_IN_FLIGHT).await?.into_iter();
        Ok(joined
            .into_iter()
            .filter_map(|j| {
                let all = checked.by_ref().take(j.rows.len()).all(|c| c.current);
                all.then_some(j.hit)
            })
            .collect())
    }
}

/// A scanned global index row of `table` as a hit for verification: its entity's group
/// (from the entry's primary key) and the row.
fn global_hit(
    catalog: &Catalog,
    table: &str,
    row: &Row,
    entry: &IndexEntry,
) -> Result<GlobalHit, ClientError> {
    let t = catalog.require_table(table).map_err(schema)?;
    let group_key = entry
        .primary_key
        .get(..catalog.group_key_len(t))
        .ok_or_else(|| {
            ClientError::Corrupt(format!("{}: an entry without its group key", entry.index))
        })?;
    let eg: EgId = entity_group(catalog, table, group_key)?;
    Ok(GlobalHit {
        eg,
        row: row.clone(),
    })
}

/// The smallest key after `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    [key, &[0]].concat()
}

/// A global index and the rows a query of it reads; any other kind refused.
fn global_query_rows<'c>(
    catalog: &'c Catalog,
    query: &IndexQuery,
) -> Result<(&'c megastore_schema::catalog::Index, KeyRange), ClientError> {
    let (index, range) = catalog.index_query_rows(query).map_err(schema)?;
    if index.kind != IndexKind::Global {
        return Err(ClientError::Schema(format!(
            "{} is a {} index: scan it inside a transaction of its group",
            index.name,
            index.kind.keyword()
        )));
    }
    Ok((index, range))
}

fn table_of<'c>(
    catalog: &'c Catalog,
    index: &megastore_schema::catalog::Index,
) -> Result<&'c str, ClientError> {
    catalog
        .table_by_id(index.table)
        .map(|t| t.name.as_str())
        .ok_or_else(|| ClientError::Schema(format!("{}: its table is missing", index.name)))
}

/// The table every query of a join indexes, once each query is one a join can run.
fn join_table<'c>(catalog: &'c Catalog, queries: &[IndexQuery]) -> Result<&'c str, ClientError> {
    let refuse = |why: String| Err(ClientError::Schema(format!("merge-join: {why}")));
    let Some(first) = queries.first() else {
        return refuse("give at least one index query".into());
    };
    let mut table = None;
    for query in queries {
        let (index, _) = global_query_rows(catalog, query)?;
        if query.equal.len() != index.columns.len() {
            return refuse(format!(
                "{} has {} columns: give a value for each ({} given), so its entries run in primary key order",
                index.name,
                index.columns.len(),
                query.equal.len()
            ));
        }
        if query.reverse
            || query.page.is_some()
            || query.limit.is_some()
            || query.lower != std::ops::Bound::Unbounded
            || query.upper != std::ops::Bound::Unbounded
        {
            return refuse(format!(
                "the query of {} may give equal values only (the join's own limit and page apply)",
                index.name
            ));
        }
        let this = table_of(catalog, index)?;
        match table {
            None => table = Some(this),
            Some(t) if t != this => {
                return refuse(format!(
                    "{} indexes {this}, {} indexes {t}: a join needs one table",
                    index.name, first.index
                ));
            }
            Some(_) => {}
        }
    }
    Ok(table.expect("at least one query"))
}

/// Where a merge-join reads global index rows: the cluster, or a test's map.
pub(crate) trait GlobalRows {
    /// At most `limit` rows of `range`, in key order.
    async fn global_rows(&self, range: KeyRange, limit: usize) -> Result<Vec<Row>, ClientError>;
}

impl GlobalRows for Client {
    async fn global_rows(&self, range: KeyRange, limit: usize) -> Result<Vec<Row>, ClientError> {
        Ok(self.scan_global_rows(range, Some(limit), false).await?.rows)
    }
}

/// A merge-join's hit and the index rows it was found in (for verification).
pub(crate) struct Joined {
    pub(crate) hit: JoinHit,
    /// Each entry's row, in the order of the entries.
    pub(crate) rows: Vec<Row>,
}

/// The hits of a merge-join (checked by [`join_table`]) in primary key order, and the
/// token of the page after them if `limit` cut it short: each source skips ahead to
/// the largest key any other reached, until all stand on one key.
pub(crate) async fn zig_zag<S: GlobalRows>(
    rows: &S,
    catalog: &Catalog,
    queries: &[IndexQuery],
    limit: Option<usize>,
    after: Option<&PageToken>,
) -> Result<(Vec<Joined>, Option<PageToken>), ClientError> {
    let mut sources = queries
        .iter()
        .map(|q| JoinSource::new(catalog, q))
        .collect::<Result<Vec<_>, _>>()?;
    // The primary key suffix every source must reach next.
    let mut target = after.map_or_else(Vec::new, |t| successor(t.as_bytes()));
    let mut hits = Vec::new();
    let mut last = None;
    'join: while limit.is_none_or(|l| hits.len() < l) {
        let mut highest = target.clone();
        for source in &mut sources {
            match source.head_from(rows, catalog, &target).await? {
                None => break 'join,
                Some(head) if *head > highest => highest = head.clone(),
                Some(_) => {}
            }
        }
        if highest != target {
            target = highest;
            continue;
        }
        let (rows, entries): (Vec<Row>, Vec<IndexEntry>) =
            sources.iter_mut().map(JoinSource::pop).unzip();
        hits.push(Joined {
            hit: JoinHit {
                primary_key: entries[0].primary_key.clone(),
                entries,
            },
            rows,
        });
        target = successor(&highest);
        last = Some(highest);
    }
    let full = limit.is_some_and(|l| hits.len() >= l);
    let next = last.filter(|_| full).map(PageToken::from_bytes);
    Ok((hits, next))
}

/// One index of a merge-join: its rows from a point on, a page at a time.
struct JoinSource {
    /// The rows of the query (every entry's key is `prefix ‖ primary key`).
    range: KeyRange,
    /// Entries read and not yet passed, by primary key suffix, in order.
    buffered: std::collections::VecDeque<(Vec<u8>, Row, IndexEntry)>,
    /// Where the buffer's rows end: nothing between the last buffered row and this
    /// was skipped (`None`: the index's rows end there).
    read_to: Option<Vec<u8>>,
}

impl JoinSource {
    fn new(catalog: &Catalog, query: &IndexQuery) -> Result<Self, ClientError> {
        let (_, range) = global_query_rows(catalog, query)?;
        Ok(Self {
            range,
            buffered: Default::default(),
            read_to: Some(Vec::new()),
        })
    }

    /// The first entry at or after primary key suffix `target` (reading on as needed).
    async fn head_from<S: GlobalRows>(
        &mut self,
        rows: &S,
        catalog: &Catalog,
        target: &[u8],
    ) -> Result<Option<&Vec<u8>>, ClientError> {
        while self
            .buffered
            .front()
            .is_some_and(|(k, _, _)| k.as_slice() < target)
        {
            self.buffered.pop_front();
        }
        if self.buffered.is_empty() {
            let Some(read_to) = &self.read_to else {
                return Ok(None);
            };
            let from = std::cmp::max(read_to.as_slice(), target).to_vec();
            let prefix_len = self.range.start.len();
            let start = [&self.range.start[..], &from].concat();
            let range = KeyRange {
                start,
                end: self.range.end.clone(),
            };
            let scanned = rows.global_rows(range, JOIN_PAGE).await?;
            self.read_to = match scanned.last() {
                Some(last) if scanned.len() == JOIN_PAGE => {
                    Some(successor(&last.key[prefix_len..]))
                }
                _ => None,
            };
            let entries = entries_of(catalog, scanned)?;
            self.buffered = entries
                .into_iter()
                .map(|(row, entry)| (row.key[prefix_len..].to_vec(), row, entry))
                .collect();
        }
        Ok(self.buffered.front().map(|(k, _, _)| k))
    }

    /// Takes the head entry and its row (there is one: [`JoinSource::head_from`] found
    /// it).
    fn pop(&mut self) -> (Row, IndexEntry) {
        let (_, row, entry) = self
            .buffered
            .pop_front()
            .expect("a join pops only a source whose head it saw");
        (row, entry)
    }
}

/// The index entries of `rows` with their rows (rows that hold none left out).
fn entries_of(catalog: &Catalog, rows: Vec<Row>) -> Result<Vec<(Row, IndexEntry)>, ClientError> {
    let mut entries = Vec::new();
    for row in rows {
        if let Some(entry) = catalog.index_entry_from_row(&row).map_err(schema)? {
            entries.push((row, entry));
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
