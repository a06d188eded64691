//! The Trestle wire contract: the `trestle.v1` gRPC types and stubs generated from
//! `proto/trestle/v1/trestle.proto`, and the encoded descriptor set that server reflection serves.
//!
//! Both the server and the SDK depend on this crate, so the contract (the access-token format in
//! [`access`] included) is compiled once and can never drift between them.

pub mod access;
pub mod codec;
pub mod datetime;
mod error_code;
pub mod pages;
pub mod reply;

pub use error_code::ErrorCode;

/// Generated `trestle.v1` messages, client and server stubs.
pub mod pb {
    #![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
    #![allow(clippy::all, clippy::pedantic)]

    tonic::include_proto!("trestle.v1");
    include!(concat!(env!("OUT_DIR"), "/server/trestle.v1.rs"));

    pub use crate::pages::{QueryEntitiesResponse, ScanEntitiesResponse};

    /// The encoded `FileDescriptorSet` of `trestle.v1`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/trestle_descriptor.bin"));
}

/// The bare echo service `trestle-bench` uses as its in-run gRPC baseline.
pub mod bench_pb {
    #![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
    #![allow(clippy::all, clippy::pedantic)]

    tonic::include_proto!("trestle.bench.v1");
}

#[cfg(test)]
mod tests {
    use prost::Message;

    #[test]
    fn the_descriptor_set_decodes_and_holds_the_service() {
        let set = prost_types::FileDescriptorSet::decode(super::pb::FILE_DESCRIPTOR_SET)
            .expect("a descriptor set");
        let trestle = set
            .file
            .iter()
            .find(|f| f.package() == "trestle.v1")
            .expect("trestle.v1");
        assert!(trestle.service.iter().any(|s| s.name() == "TableService"));
        assert!(
            set.file.iter().all(|f| f.package() != "trestle.bench.v1"),
            "the echo baseline is not served"
        );
    }
}
