//! The catalog the typed half of the public API is checked against, read from lockd
//! (the conversions of its entities and values are `megastore_rpc::public`'s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::schema_store::load_catalog;
use megastore_rpc::LockdClient;
use megastore_schema::Catalog;
use tonic::Status;

/// How long a loaded catalog is used before lockd is asked again: a new catalog
/// version reaches every gateway's writes within this (a backfill waits it out).
pub const CATALOG_FRESH: Duration = Duration::from_secs(1);

/// The cluster's catalog, re-read from lockd at most once per [`CATALOG_FRESH`].
pub(crate) struct Catalogs {
    lockd: LockdClient,
    cached: tokio::sync::Mutex<Option<(Arc<Catalog>, Instant)>>,
}

impl Catalogs {
    pub(crate) fn new(lockd: LockdClient) -> Self {
        Self {
            lockd,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) async fn current(&self) -> Result<Arc<Catalog>, Status> {
        let mut cached = self.cached.lock().await;
        if let Some((catalog, at)) = cached.as_ref()
            && at.elapsed() < CATALOG_FRESH
        {
            return Ok(Arc::clone(catalog));
        }
        let loaded = load_catalog(&self.lockd)
            .await
            .map_err(|e| Status::unavailable(format!("reading the schema: {e}")))?;
        let Some((catalog, _)) = loaded else {
            return Err(Status::failed_precondition(
                "no schema is applied to this cluster: run `megastore schema apply FILE --config CLUSTER`",
            ));
        };
        let catalog = Arc::new(catalog);
        *cached = Some((Arc::clone(&catalog), Instant::now()));
        Ok(catalog)
    }
}
