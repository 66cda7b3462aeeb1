//! Arbitrary bytes at a live replica's public API: every method of
//! `megastore.client.v1.Megastore` (read from the proto file, so a new method is
//! covered as it is added) gets request bodies that are random bytes or random
//! protobuf (fields of every wire type, nested), with and without a schema applied —
//! so the gateway's own conversions and checks are reached, not only the decoder.
//! Every call must end in a gRPC status the server chose (no dropped stream, no internal
//! error but tonic's refusal of a body that does not decode), no replica may log a
//! panic, and the replica must still commit afterwards.

use std::str::FromStr;
use std::time::Duration;

use megastore_rpc::pb::client as pb;
use prost::bytes::{Buf, BufMut};
use rand::{Rng, SeedableRng};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;

use crate::support::{api_at, apply_schema, grpc_begin_with_write, grpc_committed, start_cluster};

/// Bodies sent to each method.
const BODIES_PER_METHOD: usize = 60;

/// Request and response bodies as they are on the wire.
#[derive(Debug, Clone, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let body = src.copy_to_bytes(src.remaining()).to_vec();
        Ok(Some(body))
    }
}

/// The methods of the public service, from its proto file.
fn methods() -> Vec<String> {
    let proto = megastore_e2e::repo_root().join("proto/megastore/client/v1/client.proto");
    let text = std::fs::read_to_string(proto).unwrap();
    let methods: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_string())
        .collect();
    assert!(methods.len() > 30, "{methods:?}");
    methods
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Random protobuf: fields 1 to 8 of random wire types, strings and nested messages
/// (a nested message is also valid bytes, a string or a packed field).
fn message(rng: &mut rand_chacha::ChaCha8Rng, depth: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(0..6) {
        let field: u64 = rng.random_range(1..9);
        match rng.random_range(0..4) {
            0 => {
                varint(&mut out, field << 3);
                let value = match rng.random_range(0..3) {
                    0 => rng.random_range(0..4),
                    1 => u64::MAX - rng.random_range(0..4),
                    _ => rng.random(),
                };
                varint(&mut out, value);
            }
            1 if depth < 4 => {
                let inner = message(rng, depth + 1);
                varint(&mut out, (field << 3) | 2);
                varint(&mut out, inner.len() as u64);
                out.extend(inner);
            }
            2 => {
                let text: Vec<u8> = match rng.random_range(0..3) {
                    0 => b"alice/1".to_vec(),
                    1 => b"User".to_vec(),
                    _ => (0..rng.random_range(0..40)).map(|_| rng.random()).collect(),
                };
                varint(&mut out, (field << 3) | 2);
                varint(&mut out, text.len() as u64);
                out.extend(text);
            }
            _ => {
                varint(&mut out, (field << 3) | 1);
                out.extend(rng.random::<u64>().to_le_bytes());
            }
        }
    }
    out
}

/// Sends every method its garbage; returns how many calls got each status code.
async fn garble(address: &str, seed: u64) -> std::collections::BTreeMap<String, usize> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_lazy();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut codes = std::collections::BTreeMap::new();
    for method in methods() {
        let path =
            PathAndQuery::from_str(&format!("/megastore.client.v1.Megastore/{method}")).unwrap();
        for i in 0..BODIES_PER_METHOD {
            let body = if i % 4 == 0 {
                (0..rng.random_range(0..64)).map(|_| rng.random()).collect()
            } else {
                message(&mut rng, 0)
            };
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready().await.unwrap();
            let mut request = tonic::Request::new(body.clone());
            // A watch or a stream may wait for more: the call is cut short.
            request.set_timeout(Duration::from_secs(2));
            let call = grpc.unary(request, path.clone(), Raw);
            let status = match tokio::time::timeout(Duration::from_secs(10), call).await {
                Ok(Ok(_)) => "OK".to_string(),
                // A handler that panicked drops its stream: the client sees a reset
                // or a transport error, not a status the server chose.
                Ok(Err(status))
                    if status.message().contains("h2 protocol error")
                        || status.message().contains("transport error") =>
                {
                    panic!("{method} with {body:?}: the call was dropped: {status:?}")
                }
                // Internal is tonic's answer to a body that does not decode (naming
                // the field); from the gateway it would be a bug.
                Ok(Err(status))
                    if status.code() == tonic::Code::Internal
                        && !status
                            .message()
                            .starts_with("failed to decode Protobuf message") =>
                {
                    panic!("{method} with {body:?}: an internal error: {status:?}")
                }
                Ok(Err(status)) => format!("{:?}", status.code()),
                Err(_) => panic!("{method} with {body:?}: no answer in 10 s"),
            };
            *codes.entry(status).or_insert(0) += 1;
        }
    }
    codes
}

#[test]
fn garbage_at_the_public_api_gets_statuses_and_no_panic() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let address = config.replica("a").unwrap().address.clone();
    let cfg = cluster.config_path.to_str().unwrap().to_string();
    runtime.block_on(async {
        let mut api = api_at(&address);
        // Serving first, so refusals are the gateway's, not a replica starting.
        let started = std::time::Instant::now();
        loop {
            let txn = grpc_begin_with_write(&mut api, b"warm", (b"k", b"c", b"v")).await;
            if let Some(txn) = txn
                && grpc_committed(api.commit(pb::CommitRequest { txn }).await).is_some()
            {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let without_schema = garble(&address, 1).await;
        apply_schema(&cfg, "schema/photos.msdl", dir.path());
        let with_schema = garble(&address, 2).await;
        for codes in [&without_schema, &with_schema] {
            // Some bodies decode and get through to the library, most are refused.
            assert!(codes.contains_key("InvalidArgument"), "{codes:?}");
            assert!(codes.len() > 2, "{codes:?}");
        }
        // Still serving.
        let txn = grpc_begin_with_write(&mut api, b"after", (b"k", b"c", b"v"))
            .await
            .expect("begin after the garbage");
        assert!(grpc_committed(api.commit(pb::CommitRequest { txn }).await).is_some());
    });
    for replica in ["replica-a", "replica-b", "replica-c", "replica-d"] {
        let log = cluster.process(replica).log();
        assert!(!log.contains("panicked"), "{replica} panicked:\n{log}");
    }
}
