//! Whose a replica's data directory is, and whether it may have forgotten votes.
//!
//! A replica that has voted must never vote again at a position it may have voted on
//! before. If its store is lost (a wiped disk, a new machine), it cannot know which
//! positions those were, so it rejoins (docs/protocol.md): per group, no vote until the
//! sweep learned how far the other voters got. To tell "lost its store" from "never
//! ran", a replica stamps its directory, then records in lockd that it joined — on
//! every start, before it serves. On start:
//!
//! | directory stamp | lockd `replicas/<id>/joined` | meaning |
//! |---|---|---|
//! | generation ≥ lockd's | — | its own store: trust it (rejoining if the stamp says so) |
//! | generation < lockd's | newer start recorded | a restored copy: rejoining |
//! | absent | absent, and a founder | it never served: a member from the start |
//! | absent | absent, not a founder | added to a running cluster: rejoining (no vote per group until caught up) |
//! | absent | absent, a `[[servers]]` entry | a server added for an existing replica: it holds only ranges moved to it whole from a kept store, so not rejoining |
//! | absent | present | it served before and lost its store (or is a backup, which has no stamp): rejoining |
//!
//! A replica's first server records its starts as `replicas/<replica>/joined`; any
//! other server as `servers/<server>/joined`, and its stamp names the server too.
//!
//! Every start writes generation `max(stamp, lockd) + 1` to the stamp, then to lockd. A
//! process killed between the two finds its stamp ahead of lockd and goes on; one that
//! never got to stamp comes back as new (it had not served). A rejoining stamp stays
//! rejoining: groups it has not touched since still need clearing after any later
//! restart (cleared groups keep their floor in the store).

use std::path::{Path, PathBuf};

use megastore_config::ClusterConfig;
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_rpc::LockdClient;
use megastore_types::ReplicaId;
use serde::{Deserialize, Serialize};

use crate::ProcessError;
use crate::placement_follower::Member;

/// The file in a replica's data directory.
pub(crate) const STAMP_FILE: &str = "MEGASTORE_STAMP";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub(crate) cluster: String,
    pub(crate) replica: u16,
    /// The server, if not the replica's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<u16>,
    /// Lost its store at some point: rejoin groups it has not cleared.
    pub(crate) rejoining: bool,
    /// Counts this directory's starts; lockd records the last one, so a directory
    /// older than that record is a restored copy.
    #[serde(default)]
    pub(crate) generation: u64,
}

fn joined_file(member: Member) -> String {
    if member.first {
        format!("replicas/{}/joined", member.replica.0)
    } else {
        format!("servers/{}/joined", member.server.0)
    }
}

/// The server a stamp names, if not its replica's first.
fn stamped_server(member: Member) -> Option<u16> {
    (!member.first).then_some(member.server.0)
}

/// How errors name a process.
fn describe(member: Member) -> String {
    if member.first {
        format!("replica {}", member.replica.0)
    } else {
        format!("server {} of replica {}", member.server.0, member.replica.0)
    }
}

fn stamp_path(dir: &Path) -> PathBuf {
    dir.join(STAMP_FILE)
}

fn read_stamp(dir: &Path) -> Result<Option<Stamp>, ProcessError> {
    let path = stamp_path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ProcessError::Config(format!("{}: not a megastore stamp ({e})", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ProcessError::Config(format!("{}: {e}", path.display()))),
    }
}

fn write_stamp(dir: &Path, stamp: &Stamp) -> Result<(), ProcessError> {
    let path = stamp_path(dir);
    let io = |e: std::io::Error| ProcessError::Config(format!("{}: {e}", path.display()));
    let temporary = dir.join(format!("{STAMP_FILE}.new"));
    let bytes =
        serde_json::to_vec_pretty(stamp).map_err(|e| ProcessError::Config(e.to_string()))?;
    std::fs::write(&temporary, bytes).map_err(io)?;
    std::fs::File::open(&temporary)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&temporary, &path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

async fn lockd_call(lockd: &LockdClient, command: LockCommand) -> Result<LockReply, ProcessError> {
    lockd
        .execute(command)
        .await
        .map_err(|e| ProcessError::Lock(format!("{e} (the replica needs lockd to start)")))
}

/// What lockd records of a replica's starts: the version of its file (for the next
/// compare-and-set) and the generation of its last start.
struct Recorded {
    version: u64,
    generation: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct JoinedRecord {
    cluster: String,
    generation: u64,
}

/// Checks or creates the stamp of `member`'s directory, and records this start's
/// generation in the stamp, then in lockd; returns whether it rejoins.
pub(crate) async fn check_or_stamp(
    config: &ClusterConfig,
    member: Member,
    dir: &Path,
    lockd: &LockdClient,
) -> Result<bool, ProcessError> {
    let id = member.replica;
    let recorded = joined(lockd, member).await?;
    let last_generation = recorded.as_ref().map_or(0, |r| r.generation);
    let (rejoining, dir_generation) = match read_stamp(dir)? {
        Some(found) => {
            if found.cluster != config.cluster.name
                || found.replica != id.0
                || found.server != stamped_server(member)
            {
                let owner = match found.server {
                    Some(server) => format!("server {server} of replica {}", found.replica),
                    None => format!("replica {}", found.replica),
                };
                return Err(ProcessError::Config(format!(
                    "data directory {} belongs to {owner} of cluster {:?}, not {} of {:?}; point data_dir elsewhere",
                    dir.display(),
                    found.cluster,
                    describe(member),
                    config.cluster.name
                )));
            }
            // Started since this directory was: it is a copy from before (a restored
            // backup), and may lack votes its replica cast since.
            let restored = found.generation < last_generation;
            if restored {
                tracing::warn!(
                    "data directory {} is from generation {} but {} last started in generation {last_generation}: a restored copy; rejoining",
                    dir.display(),
                    found.generation,
                    describe(member)
                );
            }
            (found.rejoining || restored, found.generation)
        }
        // No stamp: served and lost its store (or is a backup, which carries no stamp)
        // — or never served: a founding member, one added to a running cluster, or a
        // server added for a replica (which votes only on ranges copied to it whole).
        None if recorded.is_some() => (true, 0),
        None if !member.first => (false, 0),
        None => (!founder(config, id, lockd).await?, 0),
    };
    let generation = dir_generation.max(last_generation) + 1;
    // The stamp first: a process killed before lockd records this start comes back to
    // a directory at least as new as lockd's record, which is its own.
    write_stamp(
        dir,
        &Stamp {
            cluster: config.cluster.name.clone(),
            replica: id.0,
            server: stamped_server(member),
            rejoining,
            generation,
        },
    )?;
    // Recorded before this process serves (so before any vote), on every start.
    let record = JoinedRecord {
        cluster: config.cluster.name.clone(),
        generation,
    };
    let write = LockCommand::WriteFile {
        name: joined_file(member),
        expected: recorded.map_or(0, |r| r.version),
        contents: serde_json::to_vec(&record).map_err(|e| ProcessError::Config(e.to_string()))?,
    };
    match lockd.execute(write).await {
        Ok(_) => Ok(rejoining),
        Err(LockError::VersionMismatch { .. }) => Err(ProcessError::Lock(format!(
            "another process started as {} meanwhile; run one process per server",
            describe(member)
        ))),
        Err(e) => Err(ProcessError::Lock(e.to_string())),
    }
}

/// The lockd file naming the replicas a cluster was founded with.
const FOUNDERS_FILE: &str = "cluster/founders";

/// Whether replica `id` is one the cluster was founded with: the first replica to
/// start records the replicas of its config as the founders. A replica added later (to
/// a config that already served) is not one, so it starts as a rejoining replica — it
/// votes on a group only once caught up with it.
async fn founder(
    config: &ClusterConfig,
    id: ReplicaId,
    lockd: &LockdClient,
) -> Result<bool, ProcessError> {
    for _ in 0..10 {
        let read = lockd_call(
            lockd,
            LockCommand::ReadFile {
                name: FOUNDERS_FILE.into(),
            },
        )
        .await?;
        let LockReply::File(file) = read else {
            return Err(ProcessError::Lock(format!("unexpected reply {read:?}")));
        };
        if let Some(file) = file {
            let founders: Vec<u16> = serde_json::from_slice(&file.contents).map_err(|e| {
                ProcessError::Lock(format!(
                    "lockd file {FOUNDERS_FILE} is not a list of replica ids: {e}"
                ))
            })?;
            return Ok(founders.contains(&id.0));
        }
        let founders: Vec<u16> = config.replicas.iter().map(|r| r.id).collect();
        let write = LockCommand::WriteFile {
            name: FOUNDERS_FILE.into(),
            expected: 0,
            contents: serde_json::to_vec(&founders)
                .map_err(|e| ProcessError::Config(e.to_string()))?,
        };
        match lockd.execute(write).await {
            Ok(_) => return Ok(founders.contains(&id.0)),
            // Another founding replica wrote it first: read theirs.
            Err(LockError::VersionMismatch { .. }) => continue,
            Err(e) => return Err(ProcessError::Lock(e.to_string())),
        }
    }
    Err(ProcessError::Lock(format!(
        "could not read or write {FOUNDERS_FILE}"
    )))
}

/// What lockd records of `member`'s starts (`None`: it never served).
async fn joined(lockd: &LockdClient, member: Member) -> Result<Option<Recorded>, ProcessError> {
    match lockd_call(
        lockd,
        LockCommand::ReadFile {
            name: joined_file(member),
        },
    )
    .await?
    {
        LockReply::File(file) => Ok(file.map(|f| Recorded {
            version: f.version,
            // Records from before generations hold the cluster name: generation 0.
            generation: serde_json::from_slice::<JoinedRecord>(&f.contents)
                .map_or(0, |r| r.generation),
        })),
        other => Err(ProcessError::Lock(format!("unexpected reply {other:?}"))),
    }
}
