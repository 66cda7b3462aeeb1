//! The RocksDB store against the shared conformance suite, plus what only a real
//! directory can show: restarts, a locked or corrupt directory, and a SIGKILL.

mod conformance {
    use megastore_rowstore::conformance::Harness;
    use megastore_rowstore_rocksdb::RocksStore;

    /// A store in a temporary directory; a restart closes and reopens it.
    struct RocksHarness {
        dir: tempfile::TempDir,
        store: Option<RocksStore>,
    }

    impl RocksHarness {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            let store = RocksStore::open(dir.path()).expect("open");
            Self {
                dir,
                store: Some(store),
            }
        }
    }

    impl Harness for RocksHarness {
        type Store = RocksStore;

        fn store(&self) -> &RocksStore {
            self.store.as_ref().expect("store is open")
        }

        fn restart(&mut self) {
            drop(self.store.take());
            self.store = Some(RocksStore::open(self.dir.path()).expect("reopen"));
        }
    }

    megastore_rowstore::rowstore_conformance_tests!(RocksHarness::new());
}

mod directory_errors {
    use megastore_rowstore::{Durability, RowMutation, RowRead, RowStore, RowStoreError};
    use megastore_rowstore_rocksdb::RocksStore;

    #[test]
    fn a_second_open_of_the_same_directory_is_refused_as_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _first = RocksStore::open(dir.path()).unwrap();
        let err = RocksStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, RowStoreError::Locked { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
        assert!(message.contains("locked"), "{message}");
    }

    #[test]
    fn a_checkpoint_is_a_store_with_the_data_as_of_its_making() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        let store = RocksStore::open(dir.path().join("live")).unwrap();
        let set = |value: &[u8]| RowMutation::new(&b"r"[..]).set(b"c".to_vec(), 1, value.to_vec());
        store
            .mutate_row(&set(b"before"), None, Durability::Synced)
            .unwrap();
        store.checkpoint(&copy).unwrap();
        store
            .mutate_row(
                &RowMutation::new(&b"r2"[..]).set(b"c".to_vec(), 1, b"after".to_vec()),
                None,
                Durability::Synced,
            )
            .unwrap();
        let err = store.checkpoint(&copy).unwrap_err();
        assert!(
            err.to_string().contains("copy"),
            "an existing target is refused: {err}"
        );
        drop(store);
        let restored = RocksStore::open(&copy).unwrap();
        let read = |row: &[u8]| {
            restored
                .read_row(
                    row,
                    &megastore_rowstore::KeyRange::all(),
                    megastore_rowstore::LATEST,
                )
                .unwrap()
        };
        assert_eq!(read(b"r").unwrap().value(b"c"), Some(&b"before"[..]));
        assert!(
            read(b"r2").is_none(),
            "a write after the checkpoint is not in it"
        );
    }

    #[test]
    fn a_damaged_directory_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = RocksStore::open(dir.path()).unwrap();
            let m = RowMutation::new(&b"r"[..]).set(b"c".to_vec(), 1, b"v".to_vec());
            store.mutate_row(&m, None, Durability::Synced).unwrap();
        }
        // Point CURRENT at garbage: RocksDB cannot find a valid manifest.
        std::fs::write(dir.path().join("CURRENT"), b"\x00\x01not a manifest").unwrap();
        let err = RocksStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, RowStoreError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_path_that_is_a_file_is_an_error_not_a_panic() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = RocksStore::open(file.path()).unwrap_err();
        assert!(
            err.to_string().contains(&file.path().display().to_string()),
            "{err}"
        );
    }
}

/// A child process acknowledges synced mutations one by one and is killed with
/// SIGKILL; after reopening, every acknowledged mutation must be there.
mod crash {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use megastore_rowstore::{
        Durability, KeyRange, LATEST, RowMutation, RowRead, RowStore, RowStoreError,
    };
    use megastore_rowstore_rocksdb::RocksStore;

    /// Set in the child: the directory to write to.
    const CHILD_DIR_ENV: &str = "MEGASTORE_CRASH_TEST_DIR";
    const TEST_NAME: &str = "crash::acknowledged_writes_survive_sigkill";
    /// Acknowledgements to wait for before the kill.
    const ACKS_BEFORE_KILL: u64 = 300;
    /// The child gives up after this long, so it can never run away.
    const CHILD_DEADLINE: Duration = Duration::from_secs(60);

    fn row(i: u64) -> Vec<u8> {
        format!("row/{i:08}").into_bytes()
    }

    /// From this row on the child writes as a replica's driver does: buffered, then
    /// one `sync` (with the WAL flushed by hand, a sync that did not flush RocksDB's
    /// WAL buffer would lose every one of them).
    const FIRST_BUFFERED_ROW: u64 = 200;

    /// The child: writes rows 0, 1, 2, … (every tenth as a two-row batch) and prints
    /// `ack N` after each write returns (synced writes below [`FIRST_BUFFERED_ROW`],
    /// buffered writes each followed by a sync from there on).
    fn write_until_killed(dir: &str) {
        let store = RocksStore::open(dir).expect("child opens the store");
        let mut out = std::io::stdout().lock();
        let started = Instant::now();
        for i in 0.. {
            if started.elapsed() > CHILD_DEADLINE {
                break;
            }
            let m = RowMutation::new(row(i)).set(b"v".to_vec(), i, i.to_be_bytes().to_vec());
            if i >= FIRST_BUFFERED_ROW {
                store
                    .mutate_row(&m, None, Durability::Buffered)
                    .and_then(|_| store.sync())
                    .expect("buffered write and sync");
            } else if i % 10 == 0 {
                let twin = RowMutation::new([row(i), b"/twin".to_vec()].concat()).set(
                    b"v".to_vec(),
                    i,
                    b"t".to_vec(),
                );
                store
                    .mutate_rows(&KeyRange::prefix(row(i)), &[m, twin], Durability::Synced)
                    .expect("batch");
            } else {
                store
                    .mutate_row(&m, None, Durability::Synced)
                    .expect("write");
            }
            writeln!(out, "ack {i}")
                .and_then(|()| out.flush())
                .expect("stdout");
        }
    }

    #[test]
    fn acknowledged_writes_survive_sigkill() {
        if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
            write_until_killed(&dir);
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the writer");
        let (acks_tx, acks) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let lines = BufReader::new(stdout).lines().map_while(Result::ok);
            let acked = lines.filter_map(|line| line.strip_prefix("ack ")?.parse::<u64>().ok());
            for n in acked {
                if acks_tx.send(n).is_err() {
                    break;
                }
            }
        });

        let mut last_ack = None;
        while last_ack.is_none_or(|n| n + 1 < ACKS_BEFORE_KILL) {
            match acks.recv_timeout(Duration::from_secs(30)) {
                Ok(n) => last_ack = Some(n),
                Err(e) => {
                    let _ = child.kill();
                    panic!("writer stopped acknowledging after {last_ack:?}: {e}");
                }
            }
        }
        // While the writer lives, the directory is locked against a second process.
        let err = RocksStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, RowStoreError::Locked { .. }), "{err:?}");

        child.kill().expect("SIGKILL the writer");
        child.wait().unwrap();
        // Acknowledgements already in the pipe count too.
        while let Ok(n) = acks.recv_timeout(Duration::from_millis(200)) {
            last_ack = Some(n);
        }
        let last_ack = last_ack.unwrap();

        let store = RocksStore::open(dir.path()).expect("reopen after SIGKILL");
        for i in 0..=last_ack {
            let cell = store.read_cell(&row(i), b"v", LATEST).unwrap();
            assert_eq!(
                cell.map(|c| c.value),
                Some(i.to_be_bytes().to_vec()),
                "acknowledged row {i} lost"
            );
            if i % 10 == 0 && i < FIRST_BUFFERED_ROW {
                let twin = store
                    .read_cell(&[row(i), b"/twin".to_vec()].concat(), b"v", LATEST)
                    .unwrap();
                assert!(twin.is_some(), "half of acknowledged batch {i} lost");
            }
        }
    }
}
