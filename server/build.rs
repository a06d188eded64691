//! Generates from `proto/` (with protox: no system `protoc` needed) what only the server needs: the
//! table service's server stubs, over the `trestle-proto` messages and answering with the
//! hand-encoded responses of `grpc/pages.rs` and `grpc/reply.rs`.

use std::error::Error;

const PROTO_ROOT: &str = "../proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let trestle = protox::compile(["trestle/v1/trestle.proto"], [PROTO_ROOT])?;
    tonic_prost_build::configure()
        .codec_path("::trestle_proto::codec::RequestCodec")
        .build_client(false)
        .extern_path(".trestle.v1", "::trestle_proto::pb")
        .extern_path(".trestle.v1.Entity", "crate::grpc::reply::EntityReply")
        .extern_path(
            ".trestle.v1.QueryEntitiesResponse",
            "crate::grpc::pages::QueryEntitiesResponse",
        )
        .extern_path(
            ".trestle.v1.GetEntitiesResponse",
            "crate::grpc::reply::GetEntitiesReply",
        )
        .extern_path(
            ".trestle.v1.ScanEntitiesResponse",
            "crate::grpc::pages::ScanEntitiesResponse",
        )
        .extern_path(
            ".trestle.v1.ReadChangesResponse",
            "crate::grpc::reply::ChangesReply",
        )
        .compile_fds(trestle)?;
    Ok(())
}
