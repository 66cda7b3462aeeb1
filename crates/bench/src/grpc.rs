//! `megastore bench --grpc`: the same closed loop through the public gRPC API, as a
//! client in another language drives it: each client talks to the full replica at its
//! site, writes with Begin, Write and Commit (Begin blind with `--blind`), reads with
//! Read; a commit that conflicts is run again, up to the spec's attempts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_paxos::ReadMode;
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use megastore_types::ReplicaKind;
use tonic::transport::Channel;

use crate::closed_loop::run_clients;
use crate::report::{Done, Kind, Report};
use crate::workload::{KEY, group_name};
use crate::{Spec, SpecError};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One write of `value` to group `eg`, Begin to Commit, again on conflict: whether it
/// committed within `attempts`.
async fn write(
    api: &mut MegastoreClient<Channel>,
    eg: &[u8],
    value: &[u8],
    attempts: u32,
    blind: bool,
) -> Result<bool, tonic::Status> {
    for _ in 0..attempts {
        let begun = api
            .begin(pb::BeginRequest {
                eg: eg.to_vec(),
                root: None,
                blind,
            })
            .await?
            .into_inner();
        let row = pb::RowWrite {
            key: KEY.to_vec(),
            cells: vec![pb::CellWrite {
                column: b"v".to_vec(),
                change: Some(pb::cell_write::Change::Set(value.to_vec())),
            }],
        };
        api.write(pb::WriteRequest {
            txn: begun.txn,
            rows: vec![row],
        })
        .await?;
        let answer = api
            .commit(pb::CommitRequest { txn: begun.txn })
            .await?
            .into_inner();
        if let Some(pb::commit_response::Outcome::Committed(_)) = answer.outcome {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One read of group `eg`'s row in `mode`.
async fn read(
    api: &mut MegastoreClient<Channel>,
    eg: &[u8],
    mode: ReadMode,
) -> Result<(), tonic::Status> {
    let mode = match mode {
        ReadMode::Snapshot => pb::ReadMode::Snapshot,
        ReadMode::Inconsistent => pb::ReadMode::Inconsistent,
        _ => pb::ReadMode::Current,
    };
    api.read(pb::ReadRequest {
        eg: eg.to_vec(),
        mode: mode as i32,
        query: Some(pb::RowQuery {
            query: Some(pb::row_query::Query::Keys(pb::row_query::Keys {
                keys: vec![KEY.to_vec()],
            })),
        }),
    })
    .await?;
    Ok(())
}

/// Runs `spec` through the public gRPC API of the cluster of `config` (writes begun
/// blind if `blind`); `progress` hears how many operations are done.
pub async fn run_grpc(
    config: &ClusterConfig,
    spec: &Spec,
    blind: bool,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Report, SpecError> {
    if spec.rotate_sites || spec.fill {
        return Err(SpecError::Invalid(
            "--grpc goes with neither --rotate-sites nor --fill".into(),
        ));
    }
    let sites = spec.check(config)?;
    let transport = megastore_rpc::Transport::from_config(config)
        .map_err(|e| SpecError::Invalid(format!("the cluster's TLS files: {e}")))?;
    // Connections by (site, number): shared by the clients that map to one.
    let mut connections: std::collections::HashMap<(usize, usize), Channel> = Default::default();
    let mut clients = Vec::new();
    for i in 0..spec.clients as usize {
        let site = i % sites.len();
        let number = spec.connections.map_or(i, |c| i % c as usize);
        let channel = match connections.get(&(site, number)) {
            Some(channel) => channel.clone(),
            None => {
                let replica = config
                    .replicas
                    .iter()
                    .find(|r| r.site == sites[site] && r.kind == ReplicaKind::Full)
                    .ok_or_else(|| {
                        SpecError::Invalid(format!(
                            "--grpc: site {} has no full replica to serve the API",
                            sites[site]
                        ))
                    })?;
                let channel = transport
                    .channel(&replica.address, CONNECT_TIMEOUT)
                    .map_err(|e| SpecError::Invalid(format!("--grpc: {e}")))?;
                connections.insert((site, number), channel.clone());
                channel
            }
        };
        clients.push(
            MegastoreClient::new(channel)
                .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX),
        );
    }
    let shared = Arc::new(spec.clone());
    let value = Arc::new(vec![b'x'; spec.value_size]);
    let mut report = run_clients(spec, &sites, clients, progress, move |mut api, pick| {
        let (spec, value) = (shared.clone(), value.clone());
        async move {
            let eg = group_name(&spec, pick.n).into_bytes();
            let began = Instant::now();
            let outcome = if pick.read {
                match read(&mut api, &eg, spec.read_mode).await {
                    Ok(()) => Done::Timed(Kind::Read, began.elapsed()),
                    Err(e) => Done::Failed(Kind::Read, e.to_string()),
                }
            } else {
                match write(&mut api, &eg, &value, spec.write_attempts, blind).await {
                    Ok(true) => Done::Timed(Kind::Write, began.elapsed()),
                    Ok(false) => Done::Conflict,
                    Err(e) => Done::Failed(Kind::Write, e.to_string()),
                }
            };
            (api, outcome)
        }
    })
    .await;
    report.system = if blind {
        "megastore-grpc-blind".into()
    } else {
        "megastore-grpc".into()
    };
    Ok(report)
}
