//! The shell's index commands: `index scan` (a page of a local or global index query)
//! and `index join` (a merge-join of global index queries).

use std::ops::Bound;

use anyhow::Context;
use megastore_client::{IndexQuery, IndexRead, PageToken};
use megastore_schema::{Catalog, IndexKind};

use super::Session;
use crate::shell_entities as entities;
use crate::shell_parse::IndexScanArgs;

fn read_of(verify: bool) -> IndexRead {
    if verify {
        IndexRead::Verified
    } else {
        IndexRead::AsApplied
    }
}

impl Session {
    pub(super) fn index_scan(
        &mut self,
        catalog: &Catalog,
        args: IndexScanArgs,
    ) -> anyhow::Result<String> {
        let i = entities::index(catalog, &args.index)?;
        let t = catalog
            .table_by_id(i.table)
            .context("catalog invariant: an index's table exists")?;
        let query = query_of(i, t, &args)?;
        let (entries, next) = if i.kind == IndexKind::Global {
            let scan = self.runtime.block_on(self.client.scan_global_index(
                catalog,
                &query,
                read_of(args.verify),
            ))?;
            (scan.entries, scan.next)
        } else {
            anyhow::ensure!(
                !args.verify,
                "--verify is for global indexes: {} is kept with its entities",
                args.index
            );
            let group_len = catalog.group_key_len(t);
            anyhow::ensure!(
                args.values.len() >= group_len,
                "{} is a {} index: its first {group_len} value(s) name the entity group",
                args.index,
                i.kind.keyword()
            );
            let (_, eg) = Self::root_group(catalog, &t.name, &args.values[..group_len])?;
            let page = match self.transaction.as_mut() {
                Some(txn) => self.runtime.block_on(txn.scan_index(catalog, &query))?,
                None => {
                    let mut txn = self.client.begin(&eg);
                    self.runtime.block_on(txn.scan_index(catalog, &query))?
                }
            };
            (page.entries, page.next)
        };
        let mut text = entities::render_entries(i, t, &entries);
        if let Some(token) = next {
            text.push_str(&format!(
                "\n(more: the same scan with --page {})",
                hex::encode(token.as_bytes())
            ));
        }
        Ok(text)
    }

    pub(super) fn index_join(
        &mut self,
        catalog: &Catalog,
        queries: &[(String, Vec<String>)],
        limit: usize,
        verify: bool,
    ) -> anyhow::Result<String> {
        let mut typed = Vec::new();
        let mut table = None;
        for (index, values) in queries {
            let i = entities::index(catalog, index)?;
            let t = catalog
                .table_by_id(i.table)
                .context("catalog invariant: an index's table exists")?;
            table.get_or_insert(t);
            typed.push(IndexQuery::new(index).equal(entities::index_values(i, t, values)?));
        }
        let table = table.context("a join has queries")?;
        let joined = self.runtime.block_on(self.client.merge_join(
            catalog,
            &typed,
            Some(limit),
            None,
            read_of(verify),
        ))?;
        let keys: Vec<_> = joined.hits.into_iter().map(|h| h.primary_key).collect();
        let mut text = entities::render_keys(table, &keys);
        if joined.next.is_some() {
            text.push_str(&format!("\n(more may follow: raise --limit past {limit})"));
        }
        Ok(text)
    }
}

/// The typed query an `index scan` asks.
fn query_of(
    index: &megastore_schema::catalog::Index,
    table: &megastore_schema::catalog::Table,
    args: &IndexScanArgs,
) -> anyhow::Result<IndexQuery> {
    let equal = entities::index_values(index, table, &args.values)?;
    // A bound is a value of the column after the equal ones: type it as that column.
    let bound = |end: &Option<(String, bool)>| -> anyhow::Result<Bound<_>> {
        let Some((text, inclusive)) = end else {
            return Ok(Bound::Unbounded);
        };
        let mut with_bound = args.values.clone();
        with_bound.push(text.clone());
        let value = entities::index_values(index, table, &with_bound)?
            .pop()
            .context("a bound has a value")?;
        Ok(if *inclusive {
            Bound::Included(value)
        } else {
            Bound::Excluded(value)
        })
    };
    let page = args
        .page
        .as_deref()
        .map(|hex_text| {
            hex::decode(hex_text)
                .map(PageToken::from_bytes)
                .map_err(|e| anyhow::anyhow!("--page {hex_text}: not a page token ({e})"))
        })
        .transpose()?;
    Ok(IndexQuery {
        index: index.name.clone(),
        equal,
        lower: bound(&args.lower)?,
        upper: bound(&args.upper)?,
        reverse: args.reverse,
        limit: Some(args.limit),
        page,
    })
}
