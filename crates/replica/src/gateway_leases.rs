//! The public API's leases, locks and leased keys: requests become library calls
//! here (the library talks to lockd; see `megastore_client::leases`).

use std::time::Duration;

use megastore_client::{FencingToken, Lease, LeaseId, LockHolding};
use megastore_rpc::pb::client as pb;
use tonic::{Request, Response, Status};

use crate::gateway::{Gateway, status};
use crate::gateway_access::Caller;
use megastore_access::{Access, Target};

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn holding_to_wire(holding: LockHolding) -> pb::LockHolding {
    pb::LockHolding {
        lease: holding.lease.0,
        fencing_token: holding.token.0,
    }
}

/// How the leases a user is granted are named (`user:NAME:OWNER`): renewing or
/// revoking one asks lockd to act only on a lease so named, so a user who learns
/// another's lease id can neither keep it alive nor end it (it is answered as ended).
fn lease_owner_prefix(caller: &Caller) -> Option<String> {
    caller.user().map(|user| format!("user:{user}:"))
}

impl Gateway {
    pub(crate) async fn serve_lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        // Any user may hold leases; what it may lock is checked by name. A user's
        // lease is named after it, so only it can renew or end it.
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let owner = match lease_owner_prefix(&caller) {
            Some(prefix) => format!("{prefix}{}", request.owner),
            None => request.owner,
        };
        let lease = self
            .client
            .grant_lease(&owner, Duration::from_millis(request.ttl_ms))
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LeaseGrantResponse {
            lease: lease.id.0,
            ttl_ms: millis(lease.ttl),
        }))
    }

    pub(crate) async fn serve_lease_keep_alive(
        &self,
        request: Request<pb::LeaseKeepAliveRequest>,
    ) -> Result<Response<pb::LeaseKeepAliveResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        // The caller counts the renewed ttl from before it sent its request.
        let mut lease = Lease {
            id: LeaseId(request.lease),
            ttl: Duration::ZERO,
            valid_until: std::time::Instant::now(),
        };
        let mine = lease_owner_prefix(&caller);
        self.client
            .keep_alive_owned_by(&mut lease, mine.as_deref())
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LeaseKeepAliveResponse {
            ttl_ms: millis(lease.ttl),
        }))
    }

    pub(crate) async fn serve_lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let mine = lease_owner_prefix(&caller);
        self.client
            .revoke_lease_owned_by(LeaseId(request.lease), mine.as_deref())
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LeaseRevokeResponse {}))
    }

    pub(crate) async fn serve_lock(
        &self,
        request: Request<pb::LockRequest>,
    ) -> Result<Response<pb::LockResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Write, Target::Lock(&request.name))?;
        let FencingToken(token) = self
            .client
            .lock(LeaseId(request.lease), &request.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LockResponse {
            fencing_token: token,
        }))
    }

    pub(crate) async fn serve_unlock(
        &self,
        request: Request<pb::UnlockRequest>,
    ) -> Result<Response<pb::UnlockResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Write, Target::Lock(&request.name))?;
        self.client
            .unlock(LeaseId(request.lease), &request.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::UnlockResponse {}))
    }

    pub(crate) async fn serve_lock_holder(
        &self,
        request: Request<pb::LockHolderRequest>,
    ) -> Result<Response<pb::LockHolderResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Lock(&request.name))?;
        let holder = self
            .client
            .lock_holder(&request.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LockHolderResponse {
            holder: holder.map(holding_to_wire),
        }))
    }

    pub(crate) async fn serve_put_leased(
        &self,
        request: Request<pb::PutLeasedRequest>,
    ) -> Result<Response<pb::PutLeasedResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Write, Target::Lock(&request.name))?;
        let revision = self
            .client
            .put_leased(LeaseId(request.lease), &request.name, &request.value)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PutLeasedResponse { revision }))
    }

    pub(crate) async fn serve_leased_keys(
        &self,
        request: Request<pb::LeasedKeysRequest>,
    ) -> Result<Response<pb::LeasedKeysResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Lock(&request.prefix))?;
        let keys = self
            .client
            .leased_keys(&request.prefix)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::LeasedKeysResponse {
            keys: keys
                .into_iter()
                .map(|k| pb::LeasedKey {
                    name: k.name,
                    value: k.value,
                    lease: k.lease.0,
                    revision: k.revision,
                })
                .collect(),
        }))
    }
}
