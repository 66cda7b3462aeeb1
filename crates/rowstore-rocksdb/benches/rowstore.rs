//! Row store benchmarks, the same workload on both stores: single-row mutation
//! (synced and buffered), point read of a row, and a 1,000-row scan.
//!
//! `cargo bench -p megastore-rowstore-rocksdb`; results and the machine they came from
//! are in docs/performance.md.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use megastore_rowstore::{
    Durability, KeyRange, LATEST, MemoryStore, RowMutation, RowStore, ScanOptions,
};
use megastore_rowstore_rocksdb::RocksStore;

const ROWS: u64 = 10_000;
const VALUE_BYTES: usize = 100;

/// Rows the read benchmarks read: one version each.
fn row_key(i: u64) -> Vec<u8> {
    format!("user/{i:08}").into_bytes()
}

/// Rows the write benchmarks write, apart from the rows read.
fn written_row_key(i: u64) -> Vec<u8> {
    format!("written/{i:08}").into_bytes()
}

fn mutation(row: Vec<u8>, ts: u64) -> RowMutation {
    RowMutation::new(row)
        .set(b"User.name".to_vec(), ts, vec![b'x'; VALUE_BYTES])
        .set(b"User".to_vec(), ts, Vec::new())
}

fn fill<S: RowStore>(store: &S) {
    for i in 0..ROWS {
        store
            .mutate_row(&mutation(row_key(i), 1), None, Durability::Buffered)
            .unwrap();
    }
    store.sync().unwrap();
}

fn bench_store<S: RowStore>(c: &mut Criterion, name: &str, store: &S) {
    fill(store);
    let mut group = c.benchmark_group("rowstore");
    for (label, durability) in [
        ("mutate_row_synced", Durability::Synced),
        ("mutate_row_buffered", Durability::Buffered),
    ] {
        let mut i = 0u64;
        group.bench_function(BenchmarkId::new(label, name), |b| {
            b.iter(|| {
                i += 1;
                let row = written_row_key((i * 7919) % ROWS);
                store
                    .mutate_row(&mutation(row, 2 + i), None, durability)
                    .unwrap();
            });
        });
    }
    let mut i = 0u64;
    group.bench_function(BenchmarkId::new("read_row", name), |b| {
        b.iter(|| {
            i += 1;
            black_box(
                store
                    .read_row(&row_key((i * 7919) % ROWS), &KeyRange::all(), LATEST)
                    .unwrap(),
            );
        });
    });
    let options = ScanOptions {
        limit: Some(1000),
        ..ScanOptions::default()
    };
    group.bench_function(BenchmarkId::new("scan_1000_rows", name), |b| {
        b.iter(|| {
            let rows = store
                .scan(&KeyRange::prefix(&b"user/"[..]), LATEST, &options)
                .unwrap();
            assert_eq!(rows.len(), 1000);
            black_box(rows);
        });
    });
    group.finish();
}

fn memory(c: &mut Criterion) {
    bench_store(c, "memory", &MemoryStore::new());
}

fn rocksdb(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = RocksStore::open(dir.path()).expect("open");
    bench_store(c, "rocksdb", &store);
}

criterion_group!(benches, memory, rocksdb);
criterion_main!(benches);
