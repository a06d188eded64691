//! The gRPC codec of the `trestle.v1` stubs: tonic's prost codec, except that a message is decoded
//! from one contiguous byte slice rather than through tonic's `DecodeBuf`.
//!
//! tonic hands a decoder the whole message, already contiguous in one buffer, but behind a `Buf`
//! whose every `chunk`/`advance` goes through two layers of bookkeeping; prost calls them once or
//! twice per varint. Decoding from `&[u8]` lets prost take its slice fast paths instead, which
//! matters for the large messages Trestle moves: a page of entities is thousands of map entries.
//! The wire format is unchanged.
//!
//! The server's stubs use [`RequestCodec`]: the same, except that a request that does not decode
//! (invalid UTF-8 in a string field, a truncated or malformed message) is the client's bad input,
//! `INVALID_ARGUMENT` with reason `InvalidInput`, not tonic's `INTERNAL`.
//!
//! What a codec sends is an [`EncodeReply`]: any prost message, or a reply the server encodes by
//! hand (from an entity's stored bytes), which is only ever encoded and so needs no decoder.

use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut};
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every error the Trestle server sends.
pub const ERROR_DOMAIN: &str = "trestle";

/// What a decoder does with a message that does not decode.
pub trait DecodeFailure: Send + 'static {
    /// The status for `error`.
    fn status(error: prost::DecodeError) -> Status;
}

/// The client side: a reply that does not decode is a fault (`INTERNAL`), as in tonic.
#[derive(Debug, Clone, Copy)]
pub struct ReplyFailure;

impl DecodeFailure for ReplyFailure {
    fn status(error: prost::DecodeError) -> Status {
        Status::internal(error.to_string())
    }
}

/// The server side: a request that does not decode is bad input.
#[derive(Debug, Clone, Copy)]
pub struct RequestFailure;

impl DecodeFailure for RequestFailure {
    fn status(error: prost::DecodeError) -> Status {
        let details = ErrorDetails::with_error_info(
            "InvalidInput",
            ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        Status::with_error_details(
            Code::InvalidArgument,
            format!("the request message does not decode: {error}"),
            details,
        )
    }
}

/// [`SliceCodec`] for the client's stubs.
pub type ReplyCodec<T, U> = SliceCodec<T, U, ReplyFailure>;

/// [`SliceCodec`] for the server's stubs: undecodable requests are `InvalidInput`.
pub type RequestCodec<T, U> = SliceCodec<T, U, RequestFailure>;

/// A message a codec sends: written whole into the message's buffer.
pub trait EncodeReply: Send + 'static {
    /// Writes the message's fields (its protobuf encoding, without a length prefix).
    fn encode_reply(&self, buf: &mut impl BufMut);

    /// About how many bytes [`EncodeReply::encode_reply`] writes, where that is known without
    /// working it out: the codec reserves that much first, so that a large message is not copied
    /// as its buffer grows. 0 (nothing reserved) by default.
    fn size_hint(&self) -> usize {
        0
    }

    /// The message's encoding, as a vector.
    fn encode_reply_to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.encode_reply(&mut bytes);
        bytes
    }
}

impl<T: Message + Send + 'static> EncodeReply for T {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        self.encode_raw(buf);
    }
}

/// A prost codec that decodes from a slice; named by the generated stubs (`codec_path`).
#[derive(Debug, Clone)]
pub struct SliceCodec<T, U, F> {
    types: PhantomData<(T, U, F)>,
}

impl<T, U, F> Default for SliceCodec<T, U, F> {
    fn default() -> Self {
        Self { types: PhantomData }
    }
}

impl<T, U, F> Codec for SliceCodec<T, U, F>
where
    T: EncodeReply,
    U: Message + Default + Send + 'static,
    F: DecodeFailure,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReplyEncoder<T>;
    type Decoder = SliceDecoder<U, F>;

    fn encoder(&mut self) -> Self::Encoder {
        ReplyEncoder {
            message: PhantomData,
        }
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder {
            message: PhantomData,
        }
    }
}

/// Encodes a `T` into tonic's buffer (which grows as it is written).
#[derive(Debug, Clone)]
pub struct ReplyEncoder<T> {
    message: PhantomData<T>,
}

impl<T: EncodeReply> Encoder for ReplyEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.size_hint());
        item.encode_reply(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Decodes a `U` from the message's bytes as one slice.
#[derive(Debug, Clone)]
pub struct SliceDecoder<U, F> {
    message: PhantomData<(U, F)>,
}

impl<U: Message + Default, F: DecodeFailure> Decoder for SliceDecoder<U, F> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let decoded = if buf.chunk().len() == len {
            let decoded = U::decode(buf.chunk());
            buf.advance(len);
            decoded
        } else {
            // Not contiguous after all (tonic does not do this today): the general path.
            U::decode(&mut *buf)
        };
        decoded.map(Some).map_err(F::status)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
