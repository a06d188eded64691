//! `EntityReply`: the `Entity` that answers `GetEntity` and the single-entity writes, as the
//! server's stubs send it. Besides a generated [`Entity`] it can carry the message already encoded,
//! which the server writes straight from an entity's stored bytes instead of building an `Entity`
//! (a map of strings) only to encode it. On the wire it is exactly `trestle.v1.Entity`; clients
//! decode it as that. `GetEntitiesReply` answers `GetEntities` the same way, and `ChangesReply`
//! `ReadChanges`. The server only sends them, so they are only encoded ([`EncodeReply`]).

use prost::bytes::BufMut;
use prost::encoding::WireType;
use prost::Message;

use trestle_proto::codec::EncodeReply;
use trestle_proto::pb::Entity;

use super::wire::CHANGES_CURSOR;

/// An `Entity` answering a call.
#[derive(Clone, Debug, PartialEq)]
pub enum EntityReply {
    /// A generated entity, encoded by prost.
    Entity(Entity),
    /// The bytes of an `Entity` message, encoded by the server itself.
    Encoded(Vec<u8>),
}

impl Default for EntityReply {
    fn default() -> Self {
        EntityReply::Entity(Entity::default())
    }
}

impl From<Entity> for EntityReply {
    fn from(entity: Entity) -> Self {
        EntityReply::Entity(entity)
    }
}

impl EncodeReply for EntityReply {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        match self {
            EntityReply::Entity(entity) => entity.encode_raw(buf),
            EntityReply::Encoded(bytes) => buf.put_slice(bytes),
        }
    }

    fn size_hint(&self) -> usize {
        match self {
            EntityReply::Entity(_) => 0,
            EntityReply::Encoded(bytes) => bytes.len(),
        }
    }
}

/// The answer to `GetEntities`: for each key, its entity's `Entity` message as the server encoded
/// it, or nothing. On the wire exactly `trestle.v1.GetEntitiesResponse`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetEntitiesReply {
    /// Per key, in request order: the encoded entity, or `None` where there is none.
    pub entities: Vec<Option<Vec<u8>>>,
}

/// The length of a `FoundEntity` holding `entity`.
fn found_len(entity: &Option<Vec<u8>>) -> usize {
    entity.as_ref().map_or(0, |bytes| {
        prost::encoding::key_len(1)
            + prost::encoding::encoded_len_varint(bytes.len() as u64)
            + bytes.len()
    })
}

impl EncodeReply for GetEntitiesReply {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        use prost::encoding::{encode_key, encode_varint};
        for entity in &self.entities {
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(found_len(entity) as u64, buf);
            if let Some(bytes) = entity {
                encode_key(1, WireType::LengthDelimited, buf);
                encode_varint(bytes.len() as u64, buf);
                buf.put_slice(bytes);
            }
        }
    }
}

/// A `ReadChangesResponse` whose changes are already encoded ([`super::wire::put_change`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChangesReply {
    /// The `changes` fields, each complete (key, length, `Change` message).
    pub changes: Vec<u8>,
    /// After the last record of the batch.
    pub cursor: String,
}

impl EncodeReply for ChangesReply {
    fn encode_reply(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.changes);
        if !self.cursor.is_empty() {
            prost::encoding::string::encode(CHANGES_CURSOR, &self.cursor, buf);
        }
    }

    fn size_hint(&self) -> usize {
        self.changes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_are_an_entity_on_the_wire() {
        let entity = Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            etag: "W/\"x\"".into(),
            ..Entity::default()
        };
        let generated = EntityReply::from(entity.clone());
        assert_eq!(generated.encode_reply_to_vec(), entity.encode_to_vec());

        let encoded = EntityReply::Encoded(entity.encode_to_vec());
        let bytes = encoded.encode_reply_to_vec();
        assert_eq!(Entity::decode(bytes.as_slice()).unwrap(), entity);
    }

    #[test]
    fn a_get_entities_reply_is_the_generated_response_on_the_wire() {
        let entity = Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            ..Default::default()
        };
        let reply = GetEntitiesReply {
            entities: vec![Some(entity.encode_to_vec()), None],
        };
        let bytes = reply.encode_reply_to_vec();
        let generated = trestle_proto::pb::GetEntitiesResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(generated.entities.len(), 2);
        assert_eq!(generated.entities[0].entity.as_ref(), Some(&entity));
        assert_eq!(generated.entities[1].entity, None);
    }
}
