//! Generates the wire contract from `proto/` with protox (no system `protoc` needed): the
//! `trestle.v1` messages and client stubs, the encoded file descriptor set, and the access-token
//! claims. The server generates its own stubs from the same files (`server/build.rs`).

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTO_ROOT: &str = "proto";
const PROTO_FILE: &str = "proto/trestle/v1/trestle.proto";
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
        .btree_map(".trestle.v1.ObjectValue.members")
        .build_server(false)
        .compile_fds(descriptors)?;
    // The claims of scoped access tokens: carried in request metadata, not a service.
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(protox::compile([ACCESS_PROTO_FILE], [PROTO_ROOT])?)?;
    Ok(())
}
