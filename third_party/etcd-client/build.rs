//! Capstan's copy of etcd-client's build script: the same protos and code generation, but
//! the `.proto` files are compiled by `protox` (pure Rust) instead of a `protoc` binary, so
//! a machine with only the Rust toolchain builds the workspace. See `../README.md`.

#[cfg(feature = "build-server")]
fn should_build_server() -> bool {
    true
}

#[cfg(not(feature = "build-server"))]
fn should_build_server() -> bool {
    false
}

fn main() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");

    let files = [
        "proto/etcd/api/authpb/auth.proto",
        "proto/etcd/api/etcdserverpb/rpc.proto",
        "proto/etcd/api/mvccpb/kv.proto",
        "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
        "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
    ];
    let fds = match protox::compile(files, [proto_root]) {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("error: compiling etcd's protos with protox: {e:?}");
            std::process::exit(1);
        }
    };
    if let Err(e) = tonic_prost_build::configure()
        .build_server(should_build_server())
        .compile_fds(fds)
    {
        eprintln!("error: generating etcd's gRPC code: {e}");
        std::process::exit(1);
    }
}
