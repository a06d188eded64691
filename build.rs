//! Generates the wire contract from `proto/` with protox (no system `protoc` needed) and writes the
//! encoded file descriptor set that server reflection serves; also the benchmark's echo service and the access-token claims.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTO_ROOT: &str = "proto";
const PROTO_FILE: &str = "proto/trestle/v1/trestle.proto";
const ECHO_PROTO_FILE: &str = "proto/trestle/bench/v1/echo.proto";
const ACCESS_PROTO_FILE: &str = "proto/trestle/access/v1/access.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let descriptors = protox::compile([PROTO_FILE], [PROTO_ROOT])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("trestle_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .codec_path("crate::codec::ReplyCodec")
        .btree_map(".trestle.v1.Entity.properties")
        // Written by hand so that the server can send entities it encoded itself (`pages.rs`).
        .extern_path(
            ".trestle.v1.QueryEntitiesResponse",
            "crate::pages::QueryEntitiesResponse",
        )
        .extern_path(
            ".trestle.v1.ScanEntitiesResponse",
            "crate::pages::ScanEntitiesResponse",
        )
        .build_server(false)
        .compile_fds(descriptors.clone())?;
    // The server stubs on their own, over the messages above, except that the calls answering
    // with an `Entity` answer with an `EntityReply`, which the server may encode itself.
    let server_dir = out_dir.join("server");
    fs::create_dir_all(&server_dir)?;
    tonic_prost_build::configure()
        .codec_path("crate::codec::RequestCodec")
        .build_client(false)
        .extern_path(".trestle.v1", "crate::pb")
        .extern_path(".trestle.v1.Entity", "crate::reply::EntityReply")
        .out_dir(server_dir)
        .compile_fds(descriptors)?;
    // The benchmark's echo baseline: generated code only, never served by trestle-server.
    tonic_prost_build::configure()
        .compile_fds(protox::compile([ECHO_PROTO_FILE], [PROTO_ROOT])?)?;
    // The claims of scoped access tokens: carried in request metadata, not a service.
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(protox::compile([ACCESS_PROTO_FILE], [PROTO_ROOT])?)?;
    Ok(())
}
