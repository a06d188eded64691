//! The gRPC codec of the `trestle.v1` stubs: tonic's prost codec, except that a message is decoded
//! from one contiguous byte slice rather than through tonic's `DecodeBuf`.
//!
//! tonic hands a decoder the whole message, already contiguous in one buffer, but behind a `Buf`
//! whose every `chunk`/`advance` goes through two layers of bookkeeping; prost calls them once or
//! twice per varint. Decoding from `&[u8]` lets prost take its slice fast paths instead, which
//! matters for the large messages Trestle moves: a page of entities is thousands of map entries.
//! The wire format is unchanged.

use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

/// A prost codec that decodes from a slice; named by the generated stubs (`codec_path`).
#[derive(Debug, Clone)]
pub struct SliceCodec<T, U> {
    types: PhantomData<(T, U)>,
}

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self { types: PhantomData }
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder {
            message: PhantomData,
        }
    }
}

/// Decodes a `U` from the message's bytes as one slice.
#[derive(Debug, Clone)]
pub struct SliceDecoder<U> {
    message: PhantomData<U>,
}

impl<U: Message + Default> Decoder for SliceDecoder<U> {
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
        decoded
            .map(Some)
            .map_err(|error| Status::internal(error.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
