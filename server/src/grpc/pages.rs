//! The two responses that carry query results, `QueryEntitiesResponse` and
//! `ScanEntitiesResponse`, implemented by hand for the server's stubs: besides decoded entities
//! they can carry entities already in wire form ([`EncodedEntities`]), which the server writes
//! straight from its stored bytes instead of building an `Entity` per match only to encode it. On
//! the wire they are exactly the messages `trestle.proto` declares (clients decode them with the
//! generated types; `super::wire_contract_tests` checks every field against the descriptor set).
//! The server only sends them, so they are only encoded ([`EncodeReply`]).

use prost::bytes::BufMut;
use prost::encoding::{self, WireType};

use trestle_proto::codec::EncodeReply;
use trestle_proto::pb::{Entity, QueryStats};

/// The field number of `entities` in both responses.
pub(super) const ENTITIES: u32 = 1;
/// Field numbers of `QueryEntitiesResponse`'s other fields.
pub(super) const CONTINUATION_TOKEN: u32 = 2;
pub(super) const STATS: u32 = 3;

/// Entities in wire form: each a complete `entities` field (key, length, `Entity` message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EncodedEntities {
    fields: Vec<u8>,
    count: usize,
}

impl EncodedEntities {
    /// None yet, with room for `bytes` of them.
    pub(crate) fn with_capacity(bytes: usize) -> EncodedEntities {
        EncodedEntities {
            fields: Vec::with_capacity(bytes),
            count: 0,
        }
    }

    /// Appends one entity whose `Entity` message is `len` bytes long, written by `write`.
    ///
    /// # Panics
    /// If `write` writes other than `len` bytes: the message would be corrupt.
    pub(crate) fn push(&mut self, len: usize, write: impl FnOnce(&mut Vec<u8>)) {
        encoding::encode_key(ENTITIES, WireType::LengthDelimited, &mut self.fields);
        encoding::encode_varint(len as u64, &mut self.fields);
        let start = self.fields.len();
        write(&mut self.fields);
        assert_eq!(
            self.fields.len() - start,
            len,
            "an encoded entity is as long as announced"
        );
        self.count += 1;
    }

    /// How many entities.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes held.
    pub(crate) fn encoded_len(&self) -> usize {
        self.fields.len()
    }
}

/// One page of a query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryEntitiesResponse {
    /// The entities of this page, in key order (descending with `reverse`).
    pub entities: Vec<Entity>,
    /// More entities of the page, already encoded, sent after `entities` (server side).
    pub(crate) encoded_entities: EncodedEntities,
    /// Pass back with the same query to get the next page; empty when the query is complete.
    pub continuation_token: String,
    /// How the page was read.
    pub stats: Option<QueryStats>,
}

/// One batch of a streamed scan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanEntitiesResponse {
    /// Matches in query order.
    pub entities: Vec<Entity>,
    /// More matches, already encoded, sent after `entities` (server side).
    pub(crate) encoded_entities: EncodedEntities,
}

fn encode_entities(entities: &[Entity], encoded: &EncodedEntities, buf: &mut impl BufMut) {
    encoding::message::encode_repeated(ENTITIES, entities, buf);
    buf.put_slice(&encoded.fields);
}

impl EncodeReply for QueryEntitiesResponse {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        encode_entities(&self.entities, &self.encoded_entities, buf);
        if !self.continuation_token.is_empty() {
            encoding::string::encode(CONTINUATION_TOKEN, &self.continuation_token, buf);
        }
        if let Some(stats) = &self.stats {
            encoding::message::encode(STATS, stats, buf);
        }
    }

    fn size_hint(&self) -> usize {
        self.encoded_entities.encoded_len()
    }
}

impl EncodeReply for ScanEntitiesResponse {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        encode_entities(&self.entities, &self.encoded_entities, buf);
    }

    fn size_hint(&self) -> usize {
        self.encoded_entities.encoded_len()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use trestle_proto::pb;

    use super::*;

    fn entity(row_key: &str) -> Entity {
        Entity {
            partition_key: "p".into(),
            row_key: row_key.into(),
            etag: "W/\"x\"".into(),
            ..Entity::default()
        }
    }

    #[test]
    fn encoded_entities_decode_after_the_others_in_order() {
        let mut encoded = EncodedEntities::default();
        for row_key in ["b", "c"] {
            let body = entity(row_key).encode_to_vec();
            encoded.push(body.len(), |out| out.extend_from_slice(&body));
        }
        let page = QueryEntitiesResponse {
            entities: vec![entity("a")],
            encoded_entities: encoded.clone(),
            continuation_token: "next".into(),
            stats: Some(QueryStats {
                plan: "partition".into(),
                entities_examined: 3,
            }),
        };
        let decoded = pb::QueryEntitiesResponse::decode(&page.encode_reply_to_vec()[..]).unwrap();
        let row_keys: Vec<_> = decoded.entities.iter().map(|e| &e.row_key[..]).collect();
        assert_eq!(row_keys, ["a", "b", "c"]);
        assert_eq!(decoded.continuation_token, "next");
        assert_eq!(decoded.stats, page.stats);

        let batch = ScanEntitiesResponse {
            entities: Vec::new(),
            encoded_entities: encoded,
        };
        let decoded = pb::ScanEntitiesResponse::decode(&batch.encode_reply_to_vec()[..]).unwrap();
        assert_eq!(decoded.entities, vec![entity("b"), entity("c")]);
    }

    #[test]
    #[should_panic(expected = "as long as announced")]
    fn a_misannounced_length_is_refused() {
        EncodedEntities::default().push(3, |out| out.push(1));
    }
}
