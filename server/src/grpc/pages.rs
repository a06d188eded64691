//! The two responses that carry query results, `QueryEntitiesResponse` and
//! `ScanEntitiesResponse`, implemented by hand for the server's stubs: besides decoded entities
//! they can carry entities already in wire form ([`EncodedEntities`]), which the server writes
//! straight from its stored bytes instead of building an `Entity` per match only to encode it. On
//! the wire they are exactly the messages `trestle.proto` declares (clients decode them with the
//! generated types; `super::wire_contract_tests` checks every field against the descriptor set).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

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

    fn clear(&mut self) {
        self.fields.clear();
        self.count = 0;
    }
}

/// One page of a query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryEntitiesResponse {
    /// The entities of this page, in key order (descending with `reverse`). A decoded response
    /// has them all here.
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
    /// Matches in query order. A decoded response has them all here.
    pub entities: Vec<Entity>,
    /// More matches, already encoded, sent after `entities` (server side).
    pub(crate) encoded_entities: EncodedEntities,
}

fn encode_entities(entities: &[Entity], encoded: &EncodedEntities, buf: &mut impl BufMut) {
    encoding::message::encode_repeated(ENTITIES, entities, buf);
    buf.put_slice(&encoded.fields);
}

/// Decodes field `tag` of either response: `entities`, or a field to skip.
fn merge_entities(
    entities: &mut Vec<Entity>,
    tag: u32,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    match tag {
        ENTITIES => encoding::message::merge_repeated(wire_type, entities, buf, ctx),
        _ => encoding::skip_field(wire_type, tag, buf, ctx),
    }
}

fn entities_len(entities: &[Entity], encoded: &EncodedEntities) -> usize {
    encoding::message::encoded_len_repeated(ENTITIES, entities) + encoded.encoded_len()
}

impl prost::Message for QueryEntitiesResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_entities(&self.entities, &self.encoded_entities, buf);
        if !self.continuation_token.is_empty() {
            encoding::string::encode(CONTINUATION_TOKEN, &self.continuation_token, buf);
        }
        if let Some(stats) = &self.stats {
            encoding::message::encode(STATS, stats, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            CONTINUATION_TOKEN => {
                encoding::string::merge(wire_type, &mut self.continuation_token, buf, ctx)
            }
            STATS => encoding::message::merge(
                wire_type,
                self.stats.get_or_insert_with(QueryStats::default),
                buf,
                ctx,
            ),
            _ => merge_entities(&mut self.entities, tag, wire_type, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let token = if self.continuation_token.is_empty() {
            0
        } else {
            encoding::string::encoded_len(CONTINUATION_TOKEN, &self.continuation_token)
        };
        let stats = self
            .stats
            .as_ref()
            .map_or(0, |stats| encoding::message::encoded_len(STATS, stats));
        entities_len(&self.entities, &self.encoded_entities) + token + stats
    }

    fn clear(&mut self) {
        self.entities.clear();
        self.encoded_entities.clear();
        self.continuation_token.clear();
        self.stats = None;
    }
}

impl prost::Message for ScanEntitiesResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_entities(&self.entities, &self.encoded_entities, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        merge_entities(&mut self.entities, tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        entities_len(&self.entities, &self.encoded_entities)
    }

    fn clear(&mut self) {
        self.entities.clear();
        self.encoded_entities.clear();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

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
        let bytes = page.encode_to_vec();
        assert_eq!(bytes.len(), page.encoded_len());
        let decoded = QueryEntitiesResponse::decode(&bytes[..]).unwrap();
        let row_keys: Vec<_> = decoded.entities.iter().map(|e| &e.row_key[..]).collect();
        assert_eq!(row_keys, ["a", "b", "c"]);
        assert_eq!(decoded.continuation_token, "next");
        assert_eq!(decoded.stats, page.stats);
        assert!(decoded.encoded_entities.is_empty());

        let batch = ScanEntitiesResponse {
            entities: Vec::new(),
            encoded_entities: encoded,
        };
        let decoded = ScanEntitiesResponse::decode(&batch.encode_to_vec()[..]).unwrap();
        assert_eq!(decoded.entities, vec![entity("b"), entity("c")]);
    }

    #[test]
    #[should_panic(expected = "as long as announced")]
    fn a_misannounced_length_is_refused() {
        EncodedEntities::default().push(3, |out| out.push(1));
    }
}
