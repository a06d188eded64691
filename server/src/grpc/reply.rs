//! `EntityReply`: the `Entity` that answers `GetEntity` and the single-entity writes, as the
//! server's stubs send it. Besides a generated [`Entity`] it can carry the message already encoded,
//! which the server writes straight from an entity's stored bytes instead of building an `Entity`
//! (a map of strings) only to encode it. On the wire it is exactly `trestle.v1.Entity`; clients
//! decode it as that.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

use trestle_proto::pb::Entity;

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
}
