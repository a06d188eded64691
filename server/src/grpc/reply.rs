//! `EntityReply`: the `Entity` that answers `GetEntity` and the single-entity writes, as the
//! server's stubs send it. Besides a generated [`Entity`] it can carry the message already encoded,
//! which the server writes straight from an entity's stored bytes instead of building an `Entity`
//! (a map of strings) only to encode it. On the wire it is exactly `trestle.v1.Entity`; clients
//! decode it as that. `GetEntitiesReply` answers `GetEntities` the same way, and `ChangesReply`
//! `ReadChanges`.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

use trestle_proto::pb::Entity;

use super::wire::{CHANGES_CHANGES, CHANGES_CURSOR};

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

impl Message for EntityReply {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match self {
            EntityReply::Entity(entity) => entity.encode_raw(buf),
            EntityReply::Encoded(bytes) => buf.put_slice(bytes),
        }
    }

    /// Decoding (which only tests do) yields the generated form.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if let EntityReply::Encoded(bytes) = self {
            *self = EntityReply::Entity(Entity::decode(bytes.as_slice())?);
        }
        match self {
            EntityReply::Entity(entity) => entity.merge_field(tag, wire_type, buf, ctx),
            EntityReply::Encoded(_) => unreachable!("turned into an entity above"),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            EntityReply::Entity(entity) => entity.encoded_len(),
            EntityReply::Encoded(bytes) => bytes.len(),
        }
    }

    fn clear(&mut self) {
        *self = EntityReply::default();
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

impl Message for GetEntitiesReply {
    fn encode_raw(&self, buf: &mut impl BufMut) {
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

    /// Decoding (which only tests do) reads each `FoundEntity` as generated.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if tag != 1 {
            return prost::encoding::skip_field(wire_type, tag, buf, ctx);
        }
        let mut found = trestle_proto::pb::FoundEntity::default();
        prost::encoding::message::merge(wire_type, &mut found, buf, ctx)?;
        self.entities
            .push(found.entity.map(|entity| entity.encode_to_vec()));
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.entities
            .iter()
            .map(|entity| {
                let len = found_len(entity);
                prost::encoding::key_len(1) + prost::encoding::encoded_len_varint(len as u64) + len
            })
            .sum()
    }

    fn clear(&mut self) {
        self.entities.clear();
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

impl Message for ChangesReply {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.changes);
        if !self.cursor.is_empty() {
            prost::encoding::string::encode(CHANGES_CURSOR, &self.cursor, buf);
        }
    }

    /// Decoding (which only tests do) keeps each change encoded as it came.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            CHANGES_CHANGES => {
                let mut change = trestle_proto::pb::Change::default();
                prost::encoding::message::merge(wire_type, &mut change, buf, ctx)?;
                prost::encoding::message::encode(CHANGES_CHANGES, &change, &mut self.changes);
                Ok(())
            }
            CHANGES_CURSOR => prost::encoding::string::merge(wire_type, &mut self.cursor, buf, ctx),
            _ => prost::encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let cursor = match self.cursor.is_empty() {
            true => 0,
            false => prost::encoding::string::encoded_len(CHANGES_CURSOR, &self.cursor),
        };
        self.changes.len() + cursor
    }

    fn clear(&mut self) {
        self.changes.clear();
        self.cursor.clear();
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
        assert_eq!(generated.encode_to_vec(), entity.encode_to_vec());
        assert_eq!(generated.encoded_len(), entity.encoded_len());

        let encoded = EntityReply::Encoded(entity.encode_to_vec());
        assert_eq!(encoded.encoded_len(), entity.encoded_len());
        let bytes = encoded.encode_to_vec();
        assert_eq!(Entity::decode(bytes.as_slice()).unwrap(), entity);
        assert_eq!(
            EntityReply::decode(bytes.as_slice()).unwrap(),
            EntityReply::Entity(entity)
        );
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
        let bytes = reply.encode_to_vec();
        assert_eq!(bytes.len(), reply.encoded_len());
        let generated = trestle_proto::pb::GetEntitiesResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(generated.entities.len(), 2);
        assert_eq!(generated.entities[0].entity.as_ref(), Some(&entity));
        assert_eq!(generated.entities[1].entity, None);
        assert_eq!(GetEntitiesReply::decode(bytes.as_slice()).unwrap(), reply);
    }
}
