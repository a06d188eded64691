//! Generates the echo baseline's messages, client and server from `proto/` (with protox: no
//! system `protoc` needed): the bare tonic service every workload is compared with.

use std::error::Error;

const PROTO_ROOT: &str = "../proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}/trestle/bench");
    tonic_prost_build::configure().compile_fds(protox::compile(
        ["trestle/bench/v1/echo.proto"],
        [PROTO_ROOT],
    )?)?;
    Ok(())
}
