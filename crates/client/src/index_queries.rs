//! Queries across entity groups: global index scans (as applied, or verified against
//! each hit's entity), merge-joins of several global index scans, and parallel entity
//! lookups — the paper's "outer join" recipe is a scan followed by a lookup of its hits.
//!
//! A global index scan reads one replica's applied state of every group
//! (docs/protocol.md, "Global indexes"); a scan of several pages or a join may read
//! each page from a different replica, each page consistent per group.

use futures::StreamExt;
use megastore_paxos::ReadMode;
use megastore_rowstore::{KeyRange, Row};
use megastore_schema::{Catalog, Entity, IndexEntry, IndexKind, IndexQuery, PageToken, Value};
use megastore_types::ReplicaId;

use crate::client::{Client, ClientError};
use crate::entities::EntityRead;

fn schema(e: megastore_schema::EntityError) -> ClientError {
    ClientError::Schema(e.to_string())
}

/// How many entities a verified scan or a lookup reads at once, unless told.
pub const LOOKUPS_IN_FLIGHT: usize = 32;

/// How many entries a merge-join reads from one index at a time.
const JOIN_PAGE: usize = 64;

/// How a global index scan treats what the replica it reads has applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexRead {
    /// The entries as the replica has applied them: one read, possibly stale hits.
    AsApplied,
    /// Each hit checked against its entity by a current read: no stale hit.
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
    /// docs/protocol.md, "Global indexes"). [`IndexRead::Verified`] re-reads each
    /// hit's entity with a current read of its group (in parallel, a bounded number at
    /// once) and drops the entries it no longer has: no hit is then stale, though one
    /// written after the scan's replica applied may still be missing, and a page may
    /// hold fewer entries than the limit while more pages follow.
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
            let checks = entries.into_iter().map(|(row, entry)| async move {
                let current = self
                    .read_entity(catalog, ReadMode::Current, table, &entry.primary_key)
                    .await?;
                let still = match current.entity {
                    Some(entity) => entry_still_in(catalog, &entity, &row, &entry)?,
                    None => false,
                };
                Ok::<_, ClientError>(still.then_some((row, entry)))
            });
            entries = futures::stream::iter(checks)
                .buffered(LOOKUPS_IN_FLIGHT)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .filter_map(Result::transpose)
                .collect::<Result<_, _>>()?;
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
    /// ended with `after`; with [`IndexRead::Verified`], each hit's entity is re-read
    /// and kept only if it still has every entry.
    pub async fn merge_join(
        &self,
        catalog: &Catalog,
        queries: &[IndexQuery],
        limit: Option<usize>,
        after: Option<&PageToken>,
        read: IndexRead,
    ) -> Result<JoinedScan, ClientError> {
        let table = join_table(catalog, queries)?;
        let (mut hits, next) = zig_zag(self, catalog, queries, limit, after).await?;
        if read == IndexRead::Verified {
            hits = self.still_joined(catalog, table, hits).await?;
        }
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

    /// The hits whose entity, read now, still has each entry.
    async fn still_joined(
        &self,
        catalog: &Catalog,
        table: &str,
        hits: Vec<JoinHit>,
    ) -> Result<Vec<JoinHit>, ClientError> {
        let checks = hits.into_iter().map(|hit| async move {
            let current = self
                .read_entity(catalog, ReadMode::Current, table, &hit.primary_key)
                .await?;
            let Some(entity) = current.entity else {
                return Ok(None);
            };
            for entry in &hit.entries {
                let index = catalog.require_index(&entry.index).map_err(schema)?;
                let row = catalog
                    .index_entry_key(index, &entry.values, &entry.primary_key)
                    .map_err(schema)?;
                if !entry_still_in(catalog, &entity, &row, entry)? {
                    return Ok(None);
                }
            }
            Ok::<_, ClientError>(Some(hit))
        });
        futures::stream::iter(checks)
            .buffered(LOOKUPS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .filter_map(Result::transpose)
            .collect()
    }
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

/// The hits of a merge-join (checked by [`join_table`]) in primary key order, and the
/// token of the page after them if `limit` cut it short: each source skips ahead to
/// the largest key any other reached, until all stand on one key.
pub(crate) async fn zig_zag<S: GlobalRows>(
    rows: &S,
    catalog: &Catalog,
    queries: &[IndexQuery],
    limit: Option<usize>,
    after: Option<&PageToken>,
) -> Result<(Vec<JoinHit>, Option<PageToken>), ClientError> {
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
        let entries = sources.iter_mut().map(JoinSource::pop).collect::<Vec<_>>();
        hits.push(JoinHit {
            primary_key: entries[0].primary_key.clone(),
            entries,
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
    buffered: std::collections::VecDeque<(Vec<u8>, IndexEntry)>,
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
            .is_some_and(|(k, _)| k.as_slice() < target)
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
                .map(|(row, entry)| (row[prefix_len..].to_vec(), entry))
                .collect();
        }
        Ok(self.buffered.front().map(|(k, _)| k))
    }

    /// Takes the head entry (there is one: [`JoinSource::head_from`] found it).
    fn pop(&mut self) -> IndexEntry {
        self.buffered
            .pop_front()
            .expect("a join pops only a source whose head it saw")
            .1
    }
}

/// The index entries of `rows` with their row keys (rows that hold none left out).
fn entries_of(
    catalog: &Catalog,
    rows: Vec<Row>,
) -> Result<Vec<(Vec<u8>, IndexEntry)>, ClientError> {
    let mut entries = Vec::new();
    for row in rows {
        if let Some(entry) = catalog.index_entry_from_row(&row).map_err(schema)? {
            entries.push((row.key, entry));
        }
    }
    Ok(entries)
}

/// Whether `entity` (read now) still has the global index entry `entry` at row `row`,
/// with the same stored properties.
pub(crate) fn entry_still_in(
    catalog: &Catalog,
    entity: &Entity,
    row: &[u8],
    entry: &IndexEntry,
) -> Result<bool, ClientError> {
    let mutations = catalog.put_mutations(None, entity, 0).map_err(schema)?;
    let Some(written) = mutations.global.iter().find(|m| m.row == row) else {
        return Ok(false);
    };
    let now = written_row(written);
    Ok(catalog.index_entry_from_row(&now).map_err(schema)?.as_ref() == Some(entry))
}

/// The row a mutation writes, as its cell sets leave it (its deletes left out).
fn written_row(mutation: &megastore_rowstore::RowMutation) -> Row {
    let mut row = Row {
        key: mutation.row.clone(),
        cells: Default::default(),
    };
    for m in &mutation.mutations {
        if let megastore_rowstore::Mutation::Set {
            column,
            timestamp,
            value,
        } = m
        {
            row.cells.insert(
                column.clone(),
                megastore_rowstore::Cell {
                    timestamp: *timestamp,
                    value: value.clone(),
                },
            );
        }
    }
    row
}

#[cfg(test)]
mod tests;
