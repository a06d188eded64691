//! The Trestle wire contract: what the server and its clients must agree on. The `trestle.v1`
//! messages and client stubs generated from `proto/trestle/v1/trestle.proto`, the encoded
//! descriptor set (which server reflection serves and the server's own stubs are generated
//! from), the codec both sides use, the access-token format ([`access`]), the segment hash
//! ([`segment`]) and Azure's error codes ([`ErrorCode`]).
//!
//! Both the server and the SDK depend on this crate, so the contract is compiled once and can
//! never drift between them. The server's stubs, its hand-encoded responses and the benchmark's
//! echo service live in the server crate.

pub mod access;
pub mod codec;
pub mod datetime;
mod error_code;
pub mod key_order;
pub mod segment;

pub use error_code::ErrorCode;

/// Generated `trestle.v1` messages, client and server stubs.
pub mod pb {
    #![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
    #![allow(clippy::all, clippy::pedantic)]

    tonic::include_proto!("trestle.v1");

    /// The encoded `FileDescriptorSet` of `trestle.v1`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/trestle_descriptor.bin"));
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
