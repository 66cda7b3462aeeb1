//! The contract suite on the in-process backend: the recipes' decision logic, checked
//! without a cluster (the end-to-end tests run the same suite on real entity groups).

use std::sync::Arc;

use megastore_recipes::{Backend, MemoryBackend, contract};

#[tokio::test]
async fn the_recipes_keep_their_contract_on_the_memory_backend() {
    contract::run_all(|_case| Arc::new(MemoryBackend::default())).await;
}

/// A backend whose transaction checks its asserts, then lets others run before it
/// writes: check and write are not one step. The atomicity check must catch it.
#[derive(Default)]
struct CheckThenWrite(MemoryBackend);

impl Backend for CheckThenWrite {
    async fn snapshot(
        &self,
        keys: &[String],
    ) -> Result<
        std::collections::BTreeMap<String, megastore_recipes::Entry>,
        megastore_recipes::BackendError,
    > {
        self.0.snapshot(keys).await
    }

    async fn txn(
        &self,
        asserts: &[megastore_recipes::Assert],
        mutations: &[megastore_recipes::Mutation],
    ) -> Result<bool, megastore_recipes::BackendError> {
        let keys: Vec<String> = asserts.iter().map(|a| a.key.clone()).collect();
        let now = self.0.snapshot(&keys).await?;
        if asserts.iter().any(|a| now[&a.key].version != a.version) {
            return Ok(false);
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        self.0.txn(&[], mutations).await
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, megastore_recipes::BackendError> {
        self.0.keys(prefix).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_atomicity_checks_catch_a_backend_that_checks_then_writes() {
    let broken = Arc::new(CheckThenWrite::default());
    let caught = megastore_recipes::concurrent_txn(Arc::clone(&broken), "k", 8).await;
    assert!(
        matches!(&caught, Err(megastore_recipes::CheckError::Broken(m)) if m.contains("competitors applied")),
        "{caught:?}"
    );
    let board = megastore_recipes::Board::new(broken);
    board
        .add(&[megastore_recipes::NewTask {
            id: "t".into(),
            deps: Vec::new(),
            payload: Vec::new(),
        }])
        .await
        .unwrap();
    let caught =
        megastore_recipes::concurrent_claim(&board, "t", 8, std::time::Duration::from_secs(60))
            .await;
    assert!(
        matches!(&caught, Err(megastore_recipes::CheckError::Broken(m)) if m.contains("claimers won")),
        "{caught:?}"
    );
}
