//! Idempotency keys on the SDK's writes: every entity write and transaction carries one (a UUID
//! v7 made per logical call, or the caller's own), so that the client can send it again after a
//! timeout, a dropped connection or a failover and the server applies it once (the server's
//! `idempotency` module; docs/semantics.md, "Retries and idempotency").

use trestle_proto::pb;

/// A write request with an idempotency key (the `.proto`'s `idempotency_key`).
pub(crate) trait Keyed {
    /// The request's key: empty for none.
    fn idempotency_key(&mut self) -> &mut String;
}

macro_rules! keyed {
    ($($request:ty),* $(,)?) => {
        $(impl Keyed for $request {
            fn idempotency_key(&mut self) -> &mut String {
                &mut self.idempotency_key
            }
        })*
    };
}

keyed!(
    pb::InsertEntityRequest,
    pb::UpdateEntityRequest,
    pb::MergeEntityRequest,
    pb::UpsertEntityRequest,
    pb::PatchEntityRequest,
    pb::DeleteEntityRequest,
    pb::DeleteEntitiesRequest,
    pb::SubmitTransactionRequest,
    pb::TransactWriteRequest,
);

/// A new key for one logical call: a UUID v7 (time-ordered, so a server's records of it are
/// written near each other).
pub(crate) fn new_key() -> String {
    uuid::Uuid::now_v7().to_string()
}
