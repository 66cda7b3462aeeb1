//! Backfilling an index added to a table that already had entities: every group's
//! entities get their entries, group by group, each in one transaction of its group;
//! then the catalog marks the index ready and scans are served.
//!
//! Why this is complete: from the catalog version that added the index, every writer
//! that loaded it writes the index's entries with the entity (the index is in the
//! catalog, only marked [`IndexState::Building`]). `megastore schema backfill` starts
//! only after the gateways' catalog caches have expired (a program that calls
//! [`Client::backfill_index`] itself waits that second out first). The groups are
//! listed from a majority of the voters (full replicas and witnesses): every group
//! with a committed write is registered at a majority of them (its accept quorum), so
//! the union of a majority's registries holds it. A group's
//! transaction reads all its entities of the table, so a write racing it conflicts
//! and one of them retries. Rewriting an entry is idempotent: a backfill stopped
//! anywhere is run again from its last recorded group (`schema/backfill/<index>` in
//! lockd), or from the start — the result is the same.
//!
//! A Rust program that holds its own [`Catalog`] must load the new one
//! ([`crate::schema_store::load_catalog`]) before the backfill starts, or its writes
//! may leave entities without entries.

use std::ops::ControlFlow;

use futures::StreamExt;
use megastore_config::ClusterConfig;
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_rowstore::KeyRange;
use megastore_rpc::pb::admin::ListGroupsRequest;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use megastore_rpc::{LockdClient, Transport};
use megastore_schema::{Catalog, DecodedKey, IndexState, ObjectId};
use megastore_types::EgId;
use serde::{Deserialize, Serialize};

use crate::client::{Client, ClientError};
use crate::schema_store::{CATALOG_FILE, load_catalog};

/// Groups listed (and backfilled, then recorded) per step.
const GROUPS_PER_STEP: usize = 64;

/// Groups backfilled at once.
const GROUPS_IN_FLIGHT: usize = 8;

/// How far a backfill got: what its lockd file records after each step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillProgress {
    /// The last group done (its id), in key order; `None` before the first.
    pub after: Option<Vec<u8>>,
    /// Groups done.
    pub groups: u64,
    /// Entries written.
    pub entries: u64,
}

/// The lockd file recording the backfill of the index with id `index` (by id: an
/// index dropped and added again under its name is another index).
pub fn progress_file(index: ObjectId) -> String {
    format!("schema/backfill/{}", index.0)
}

fn lock_error(e: impl std::fmt::Display) -> ClientError {
    ClientError::Lock(e.to_string())
}

/// The recorded progress of `index`'s backfill, and the file's version (0: none).
pub async fn load_progress(
    lockd: &LockdClient,
    index: ObjectId,
) -> Result<(BackfillProgress, u64), ClientError> {
    let reply = lockd
        .execute(LockCommand::ReadFile {
            name: progress_file(index),
        })
        .await
        .map_err(lock_error)?;
    match reply {
        LockReply::File(None) => Ok((BackfillProgress::default(), 0)),
        LockReply::File(Some(file)) => {
            let progress = serde_json::from_slice(&file.contents)
                .map_err(|e| ClientError::Corrupt(format!("{}: {e}", progress_file(index))))?;
            Ok((progress, file.version))
        }
        other => Err(lock_error(format!("unexpected reply {other:?}"))),
    }
}

async fn save_progress(
    lockd: &LockdClient,
    index: ObjectId,
    progress: &BackfillProgress,
    expected: u64,
) -> Result<u64, ClientError> {
    let write = LockCommand::WriteFile {
        name: progress_file(index),
        expected,
        contents: serde_json::to_vec(progress).expect("progress always serializes"),
    };
    match lockd.execute(write).await {
        Ok(LockReply::Written { version }) => Ok(version),
        Ok(other) => Err(lock_error(format!("unexpected reply {other:?}"))),
        Err(LockError::VersionMismatch { .. }) => Err(ClientError::InvalidArgument(format!(
            "another backfill of index {} is recording its progress: let one run",
            index.0
        ))),
        Err(e) => Err(lock_error(e)),
    }
}

/// Marks `index` ready in the cluster's catalog (a new catalog version).
pub async fn mark_ready(lockd: &LockdClient, index: &str) -> Result<u64, ClientError> {
    for _ in 0..8 {
        let (mut catalog, version) = load_catalog(lockd)
            .await?
            .ok_or_else(|| ClientError::Schema("no schema applied".into()))?;
        let Some(i) = catalog.indexes.iter_mut().find(|i| i.name == index) else {
            return Err(ClientError::Schema(format!(
                "index {index} is no longer in the schema"
            )));
        };
        i.state = IndexState::Ready;
        catalog.fingerprint = catalog.compute_fingerprint();
        let write = LockCommand::WriteFile {
            name: CATALOG_FILE.into(),
            expected: version,
            contents: catalog.to_json().into_bytes(),
        };
        match lockd.execute(write).await {
            Ok(LockReply::Written { version }) => return Ok(version),
            Ok(other) => return Err(lock_error(format!("unexpected reply {other:?}"))),
            // The schema was applied again meanwhile: mark that version.
            Err(LockError::VersionMismatch { .. }) => continue,
            Err(e) => return Err(lock_error(e)),
        }
    }
    Err(ClientError::Schema(
        "the schema keeps changing: mark the index ready again later".into(),
    ))
}

/// The groups in `range` after `after` (at most `limit`, in key order) that some
/// replica holds, asked of every replica server and answered by a majority of the
/// voters (full replicas and witnesses): every group with a committed write was
/// accepted by a majority of them, which meets any majority, so it is among them.
///
/// With several servers per replica (`[[servers]]`), every server is asked, a voter
/// counts as answered only when every server the placement names for its slot in the
/// ranges listed answered, and the listing is taken again if the placement in lockd
/// changed meanwhile: a move's source retires the range only after the placement that
/// finishes it is stored, and its target held everything before, so under one
/// placement the server it names for a slot holds every group of the slot there.
pub async fn list_groups(
    config: &ClusterConfig,
    range: &KeyRange,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<EgId>, ClientError> {
    let topology = config
        .topology()
        .map_err(|e| ClientError::Config(e.to_string()))?;
    if config.servers.is_empty() {
        // Every slot on its replica's own server.
        let firsts = config.replicas.iter().map(|r| (r.id, r.id)).collect();
        return list_groups_once(config, &topology, &firsts, range, after, limit).await;
    }
    let lockd = megastore_rpc::LockdClient::new(config).map_err(ClientError::Config)?;
    const ATTEMPTS: usize = 10;
    for _ in 0..ATTEMPTS {
        let before = crate::placement_store::load_placement(&lockd, &topology)
            .await?
            .placement;
        let holders = slot_holders(&before, range);
        let listed = list_groups_once(config, &topology, &holders, range, after, limit).await?;
        let after_listing = crate::placement_store::load_placement(&lockd, &topology)
            .await?
            .placement
            .version();
        if after_listing == before.version() {
            return Ok(listed);
        }
    }
    Err(ClientError::Unavailable(format!(
        "listing groups: the placement changed under each of {ATTEMPTS} attempts"
    )))
}

/// (slot, server) for every server `placement` names for a slot in a range that
/// overlaps `keys`.
fn slot_holders(
    placement: &megastore_placement::Placement,
    keys: &KeyRange,
) -> std::collections::BTreeSet<(u16, u16)> {
    placement
        .ranges()
        .iter()
        .filter(|r| {
            let starts_before_end = keys.end.as_ref().is_none_or(|end| r.start < *end);
            let ends_after_start = r.end.as_ref().is_none_or(|end| *end > keys.start);
            starts_before_end && ends_after_start
        })
        .flat_map(|r| r.slots.iter().map(|s| (s.replica.0, s.server.0)))
        .collect()
}

/// One listing: every server asked; `holders` (slot, server) the servers whose answers
/// a voter needs to count as answered.
async fn list_groups_once(
    config: &ClusterConfig,
    topology: &megastore_types::Topology,
    holders: &std::collections::BTreeSet<(u16, u16)>,
    range: &KeyRange,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<EgId>, ClientError> {
    let transport =
        Transport::from_config(config).map_err(|e| ClientError::Config(e.to_string()))?;
    let start = match after {
        Some(last) => std::cmp::max([last, &[0]].concat(), range.start.clone()),
        None => range.start.clone(),
    };
    let servers = config.server_processes();
    let asks = servers.iter().map(|server| {
        let replica = &server.process;
        let transport = &transport;
        let start = start.clone();
        let ask = async move {
            let channel = transport
                .channel(replica.admin_endpoint(), config.timeouts.rpc())
                .map_err(|e| format!("server {}: {e}", replica.name))?;
            let request = ListGroupsRequest {
                start,
                end: range.end.clone(),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
            };
            let mut admin = AdminClient::new(channel);
            let token = config.operator_token().map_err(|e| e.to_string())?;
            let call = admin.list_groups(megastore_rpc::with_operator_token(
                request,
                token.as_deref(),
            ));
            match tokio::time::timeout(config.timeouts.rpc() * 4, call).await {
                Ok(Ok(answer)) => Ok(answer.into_inner().groups),
                Ok(Err(status)) => Err(format!("server {}: {}", replica.name, status.message())),
                Err(_) => Err(format!("server {}: no answer", replica.name)),
            }
        };
        let held = (replica.id, server.server);
        async move { (held, ask.await) }
    });
    // ((slot, server) asked, and what it answered).
    let answers = futures::future::join_all(asks).await;
    let (voters, majority) = (topology.voters().count(), topology.majority());
    let answered = topology
        .voters()
        .filter(|voter| {
            holders
                .iter()
                .filter(|(slot, _)| *slot == voter.0)
                .all(|held| answers.iter().any(|(asked, a)| asked == held && a.is_ok()))
        })
        .count();
    if answered < majority {
        let why: Vec<&str> = answers
            .iter()
            .filter_map(|(_, a)| a.as_ref().err().map(String::as_str))
            .collect();
        return Err(ClientError::Unavailable(format!(
            "listing groups needs {majority} of the {voters} full replicas and witnesses (the servers holding each), \
             {answered} answered ({})",
            why.join("; ")
        )));
    }
    let mut groups: std::collections::BTreeSet<Vec<u8>> = Default::default();
    for (_, answer) in answers {
        groups.extend(answer.into_iter().flatten());
    }
    Ok(groups.into_iter().take(limit).map(EgId).collect())
}

impl Client {
    /// Writes the entries of index `index` for every entity of its table in group
    /// `eg`, in one transaction of the group (retried on conflict); how many.
    pub async fn backfill_group(
        &self,
        catalog: &Catalog,
        index: &str,
        eg: &EgId,
    ) -> Result<usize, ClientError> {
        let schema = |e: megastore_schema::EntityError| ClientError::Schema(e.to_string());
        let i = catalog.require_index(index).map_err(schema)?;
        let table = catalog
            .table_by_id(i.table)
            .ok_or_else(|| ClientError::Schema(format!("{index}: its table is missing")))?;
        let mut rows = eg.0.clone();
        megastore_schema::mapping::keys::encode_object_id(table.id, &mut rows);
        let (written, _) = self
            .transaction(eg, async |txn| {
                let mut written = 0;
                for row in txn
                    .scan_rows(KeyRange::prefix(rows.clone()), None, false)
                    .await?
                {
                    let Some(entity) = catalog.entity_from_row(&row).map_err(schema)? else {
                        continue;
                    };
                    let mut mutations = catalog.put_mutations(None, &entity, 0).map_err(schema)?;
                    let of_index = |m: &megastore_rowstore::RowMutation| {
                        matches!(catalog.decode_row_key(&m.row),
                            Ok(DecodedKey::IndexEntry { index, .. }) if index == i.id)
                    };
                    mutations.group.retain(of_index);
                    mutations.global.retain(of_index);
                    written += mutations.group.len() + mutations.global.len();
                    txn.stage_mutations(&mutations)?;
                }
                Ok(written)
            })
            .await?;
        Ok(written)
    }

    /// Backfills index `index` of the cluster's catalog, from its recorded progress,
    /// calling `on_step` after each step (recorded in lockd) — which may stop it there
    /// (`ControlFlow::Break`: the index stays building, a later call resumes) — and
    /// marks it ready once every group is done.
    pub async fn backfill_index(
        &self,
        config: &ClusterConfig,
        lockd: &LockdClient,
        index: &str,
        mut on_step: impl FnMut(&BackfillProgress) -> ControlFlow<()>,
    ) -> Result<BackfillProgress, ClientError> {
        let (catalog, _) = load_catalog(lockd)
            .await?
            .ok_or_else(|| ClientError::Schema("no schema applied".into()))?;
        let i = catalog
            .require_index(index)
            .map_err(|e| ClientError::Schema(e.to_string()))?;
        let table = catalog
            .table_by_id(i.table)
            .ok_or_else(|| ClientError::Schema(format!("{index}: its table is missing")))?;
        let mut root_prefix = Vec::new();
        megastore_schema::mapping::keys::encode_object_id(
            catalog.root_of(table).id,
            &mut root_prefix,
        );
        let groups_of_root = KeyRange::prefix(root_prefix);
        let (mut progress, mut version) = load_progress(lockd, i.id).await?;
        loop {
            let groups = list_groups(
                config,
                &groups_of_root,
                progress.after.as_deref(),
                GROUPS_PER_STEP,
            )
            .await?;
            let Some(last) = groups.last().cloned() else {
                break;
            };
            let fills: Vec<_> = groups
                .iter()
                .map(|eg| self.backfill_group(&catalog, index, eg))
                .collect();
            let written: Vec<usize> = futures::stream::iter(fills)
                .buffered(GROUPS_IN_FLIGHT)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            progress.groups += groups.len() as u64;
            progress.entries += written.iter().sum::<usize>() as u64;
            progress.after = Some(last.0);
            version = save_progress(lockd, i.id, &progress, version).await?;
            if on_step(&progress).is_break() {
                return Ok(progress);
            }
        }
        if !i.state.is_ready() {
            mark_ready(lockd, index).await?;
        }
        Ok(progress)
    }
}
