//! Generates the gRPC services and messages from `proto/` (needs `protoc`: Debian's
//! protobuf-compiler, which `.ci/setup.sh` installs).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let files = [
        "megastore/replication/v1/replication.proto",
        "megastore/coordinator/v1/coordinator.proto",
        "megastore/lock/v1/lock.proto",
        "megastore/lock/v1/raft.proto",
        "megastore/client/v1/client.proto",
        "megastore/admin/v1/admin.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={root}/{file}");
    }
    let paths: Vec<String> = files.iter().map(|f| format!("{root}/{f}")).collect();
    tonic_prost_build::configure().compile_protos(&paths, &[root.to_string()])?;
    Ok(())
}
