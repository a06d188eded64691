//! Retry-safe writes: a write sent with an idempotency key applies once however often it is
//! sent within the window, on any server over the same store.
//!
//! The engine's commits pass through [`Engine::commit_once`]. With a key, the commit carries its
//! record (`crate::model::idempotency`): an insert into the hidden table [`RECORDS_TABLE`], at
//! position 0 so that its refusal is the one a retry sees, which the store's apply seals the
//! commit's outcome into ([`crate::storage::seal_record`]). A retry's record insert is refused as
//! any insert of an existing row is (a retry that arrives while the first is still running waits
//! for its partition lock, then sees the record), and nothing of it applies; the engine reads the
//! record and answers the first outcome: each entity's Timestamp and ETag, its properties (those
//! the request sent, or for a merge or patch those stored, if the entity has not changed since),
//! and the same durability wait. The same key with another request is
//! `IdempotentParameterMismatch`. A refused write (a stale ETag, an existing entity, a false
//! condition) records its refusal once refused, in a commit of the record alone, and a retry
//! answers that refusal; except a merge whose entity would break a limit, decided afresh.
//!
//! Bounded by: the record's size ([`crate::model::MAX_IDEMPOTENCY_KEY_BYTES`], 9 bytes per
//! operation) and its lifetime, the window, after which the table's time to live expires it and
//! the housekeeping sweeps it (on PostgreSQL under the housekeeping lease).

use crate::bulk_delete::Deleted;
use crate::engine::Engine;
use crate::error::TableError;
use crate::model::{
    bulk_delete_properties, record_key, record_properties, refusal_properties, EntityKey,
    IdempotencyKey, NewEntity, Operation, Properties, Recorded, RecordedOutcome, Refusal,
    RequestDigest, StoredEntity, TableName, Ticks, TimeToLive, UpsertMode, ValidationError,
};
use crate::query::QuerySpec;
use crate::storage::{
    decode_selected, on_blocking_pool, Commit, CommitOutcome, Committed, CreateRefusal, EntityView,
    PartitionBatch, RejectReason, Rejection, SettingsChange, StorageError,
};

/// How long a key's record answers retries unless `--idempotency-window` says otherwise: ten
/// minutes, DynamoDB's window for `ClientRequestToken`.
pub const DEFAULT_WINDOW_SECONDS: u64 = 600;

/// The hidden table of records (no client's table name can start with `$`).
pub const RECORDS_TABLE: &str = "$idempotency";

/// How many times a keyed commit is tried: again once the records table is created, and again
/// if the record it ran into expired before it was read.
const ATTEMPTS: usize = 3;

/// A write's idempotency key and who sent it: records of one credential never answer
/// another's.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    /// The caller's credential, as [`crate::auth::Access::idempotency_scope`] names it.
    pub scope: String,
    /// The key the caller sent.
    pub key: IdempotencyKey,
}

impl IdempotencyClaim {
    /// The claim of the key `text` (empty: none) sent by the credential `scope` names.
    pub fn parse(scope: String, text: &str) -> Result<Option<IdempotencyClaim>, ValidationError> {
        Ok(IdempotencyKey::parse(text)?.map(|key| IdempotencyClaim { scope, key }))
    }
}

fn records_table() -> TableName {
    TableName::hidden(RECORDS_TABLE)
}

impl Engine {
    /// Commits `commit` through the store's one commit; with `claim`, once within the window
    /// (this module's doc).
    pub(crate) async fn commit_once(
        &self,
        commit: Commit,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<CommitOutcome, TableError> {
        let Some(claim) = claim else {
            return Ok(self.store_arc().commit(commit).await?);
        };
        let digest = RequestDigest::of(&commit.batches);
        let at = record_key(&claim.scope, &claim.key);
        for _ in 0..ATTEMPTS {
            let keyed = self.with_record(commit.clone(), &at, digest)?;
            match self.store_arc().commit(keyed).await? {
                Ok(Committed { mut stored, ticket }) => {
                    stored.remove(0);
                    return Ok(Ok(Committed { stored, ticket }));
                }
                Err(Rejection {
                    index: 0,
                    reason: RejectReason::TableGone,
                }) => self.create_records_table().await?,
                Err(Rejection {
                    index: 0,
                    reason:
                        RejectReason::Refused {
                            refusal: Refusal::AlreadyExists,
                            ..
                        },
                }) => {
                    if let Some(record) = self.read_entity(&records_table(), &at).await? {
                        return self.replay(&commit, claim, digest, &record).await;
                    }
                }
                Err(Rejection { index, reason }) if index > 0 => {
                    let refused = Rejection {
                        index: index - 1,
                        reason,
                    };
                    return self
                        .record_refusal(&commit, claim, digest, &at, refused)
                        .await;
                }
                Err(rejection) => {
                    return Err(internal(format!(
                        "an idempotency record was refused: {rejection:?}"
                    )))
                }
            }
        }
        Err(internal(
            "an idempotency record could be neither written nor read".to_owned(),
        ))
    }

    /// Records that the request `commit` (sent with `claim`) was `refused`, in a commit of the
    /// record alone after the refused one (which wrote nothing), and answers the refusal; if a
    /// copy of the request recorded its outcome meanwhile, that outcome.
    async fn record_refusal(
        &self,
        commit: &Commit,
        claim: &IdempotencyClaim,
        digest: RequestDigest,
        at: &EntityKey,
        refused: Rejection,
    ) -> Result<CommitOutcome, TableError> {
        let RejectReason::Refused { refusal, .. } = &refused.reason else {
            return Ok(Err(refused));
        };
        let window = self.idempotency_window_seconds;
        let Some(properties) = refusal_properties(digest, window, refused.index, refusal) else {
            return Ok(Err(refused));
        };
        match self.record_alone(at, properties).await? {
            Some(record) => self.replay(commit, claim, digest, &record).await,
            None => Ok(Err(refused)),
        }
    }

    /// Writes a record of `properties` at `at` in a commit of its own: `None` once written, or
    /// the record a copy of the request wrote there first.
    async fn record_alone(
        &self,
        at: &EntityKey,
        properties: Properties,
    ) -> Result<Option<StoredEntity>, TableError> {
        for _ in 0..ATTEMPTS {
            let record = Operation::Insert(NewEntity::new(at.clone(), properties.clone())?);
            let partition = at.partition_key.clone();
            let alone = Commit::on_partition(records_table(), partition, vec![record]);
            match self.store_arc().commit(alone).await? {
                Ok(_) => return Ok(None),
                Err(Rejection {
                    reason: RejectReason::TableGone,
                    ..
                }) => self.create_records_table().await?,
                Err(Rejection {
                    reason:
                        RejectReason::Refused {
                            refusal: Refusal::AlreadyExists,
                            ..
                        },
                    ..
                }) => {
                    if let Some(record) = self.read_entity(&records_table(), at).await? {
                        return Ok(Some(record));
                    }
                }
                Err(rejection) => {
                    return Err(internal(format!(
                        "an idempotency record was refused: {rejection:?}"
                    )))
                }
            }
        }
        Err(internal(
            "an idempotency record could be neither written nor read".to_owned(),
        ))
    }

    /// [`Engine::delete_matching`] with `claim`: once a call has answered, a retry within the
    /// window answers its count and continuation and deletes nothing; the same key with another
    /// call is `IdempotentParameterMismatch`. A bulk delete is many commits, so its record is
    /// written once it has answered, in a commit of its own: a retry of a call cut short (a
    /// fault, a crash) runs again, and deletes, counting them, only the entities that still
    /// match (each delete is conditioned on the ETag read, so none applies twice). On the
    /// blocking pool, as `delete_matching`.
    pub(crate) fn delete_matching_once(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Deleted, TableError> {
        let Some(claim) = claim else {
            return self.delete_matching(table, spec, continuation);
        };
        let request = ("DeleteEntities", table.to_lowercase(), &spec, continuation);
        let digest = RequestDigest::of(&request);
        let at = record_key(&claim.scope, &claim.key);
        if let Some(record) = self.run_here(self.read_entity(&records_table(), &at))? {
            return self.recorded_deletion(claim, digest, &record);
        }
        let deleted = self.delete_matching(table, spec, continuation)?;
        let (count, next) = (deleted.count, deleted.continuation.as_deref());
        let window = self.idempotency_window_seconds;
        let properties = bulk_delete_properties(digest, window, count, next);
        match self.run_here(self.record_alone(&at, properties))? {
            None => Ok(deleted),
            Some(record) => self.recorded_deletion(claim, digest, &record),
        }
    }

    /// The answer a bulk delete's `record` holds for the call with `digest` (sent with `claim`).
    fn recorded_deletion(
        &self,
        claim: &IdempotencyClaim,
        digest: RequestDigest,
        record: &StoredEntity,
    ) -> Result<Deleted, TableError> {
        let recorded = Recorded::read(&record.properties)
            .ok_or_else(|| internal("an idempotency record is unreadable".to_owned()))?;
        match recorded.outcome {
            RecordedOutcome::Deleted {
                count,
                continuation,
            } if recorded.digest == digest => Ok(Deleted {
                count,
                continuation,
            }),
            _ => Err(self.mismatch(claim)),
        }
    }

    /// The refusal of `claim`'s key sent again with another request.
    fn mismatch(&self, claim: &IdempotencyClaim) -> TableError {
        TableError::IdempotentParameterMismatch {
            key: claim.key.as_str().to_owned(),
            window_seconds: self.idempotency_window_seconds,
        }
    }

    /// `commit` with its record at position 0, its own operations one place on.
    fn with_record(
        &self,
        mut commit: Commit,
        at: &EntityKey,
        digest: RequestDigest,
    ) -> Result<Commit, TableError> {
        let properties = record_properties(digest, self.idempotency_window_seconds);
        let record = NewEntity::new(at.clone(), properties)?;
        for batch in &mut commit.batches {
            batch
                .positions
                .iter_mut()
                .for_each(|position| *position += 1);
        }
        commit.batches.insert(
            0,
            PartitionBatch {
                table: records_table(),
                partition_key: at.partition_key.clone(),
                operations: vec![Operation::Insert(record)],
                positions: vec![0],
                seals_outcome: true,
            },
        );
        commit.operations += 1;
        Ok(commit)
    }

    /// Creates the records table, its entities expiring by their own `TimeToLive` (another
    /// server may have created it meanwhile), on the blocking pool.
    async fn create_records_table(&self) -> Result<(), TableError> {
        let store = self.store_arc();
        let ttl = TimeToLive {
            default_seconds: Some(self.idempotency_window_seconds),
        };
        let settings = SettingsChange {
            time_to_live: Some(Some(ttl)),
            ..SettingsChange::default()
        };
        on_blocking_pool(
            move || match store.create_table(&records_table(), &[], settings)? {
                Ok(_) => Ok(()),
                Err(CreateRefusal::AlreadyExists | CreateRefusal::BeingDeleted) => Ok(()),
            },
        )
        .await?;
        Ok(())
    }

    /// The first outcome of the request `commit` (sent again with `claim`), from its record.
    async fn replay(
        &self,
        commit: &Commit,
        claim: &IdempotencyClaim,
        digest: RequestDigest,
        record: &StoredEntity,
    ) -> Result<CommitOutcome, TableError> {
        let recorded = Recorded::read(&record.properties)
            .ok_or_else(|| internal("an idempotency record is unreadable".to_owned()))?;
        if recorded.digest != digest {
            return Err(self.mismatch(claim));
        }
        let stamps = match recorded.outcome {
            RecordedOutcome::Committed(stamps) => stamps,
            RecordedOutcome::Deleted { .. } => return Err(self.mismatch(claim)),
            RecordedOutcome::Refused(index, refusal) => {
                let row_key = (commit.batches.iter())
                    .flat_map(|batch| batch.operations.iter().zip(&batch.positions))
                    .find(|(_, &position)| position == index)
                    .map(|(operation, _)| operation.row_key().to_owned())
                    .ok_or_else(|| internal("a recorded refusal names no operation".into()))?;
                let reason = RejectReason::Refused { row_key, refusal };
                return Ok(Err(Rejection { index, reason }));
            }
        };
        let mut stored = vec![None; commit.operations];
        for batch in &commit.batches {
            for (operation, &position) in batch.operations.iter().zip(&batch.positions) {
                if let Some(&Some(stamp)) = stamps.get(position + 1) {
                    let entity = self.replayed(&batch.table, operation, stamp).await?;
                    stored[position] = Some(entity);
                }
            }
        }
        // Acknowledged as the first was: once what it wrote is durable.
        let ticket = Some(self.read_fence(None));
        Ok(Ok(Committed { stored, ticket }))
    }

    /// The entity `operation` stored at `stamp`: the properties it sent, or, where they
    /// depended on the entity before it (a merge or a patch), those stored, if no write has
    /// changed the entity since (else none: its Timestamp and ETag say which version it was).
    async fn replayed(
        &self,
        table: &TableName,
        operation: &Operation,
        stamp: Ticks,
    ) -> Result<StoredEntity, TableError> {
        let key = operation.key().clone();
        let properties = match operation {
            Operation::Insert(sent)
            | Operation::Update(sent, _)
            | Operation::Upsert(sent, UpsertMode::Replace) => sent.properties.clone(),
            _ => match self.read_entity(table, &key).await? {
                Some(now) if now.timestamp == stamp => now.properties,
                _ => Properties::new(),
            },
        };
        Ok(StoredEntity {
            key,
            properties,
            timestamp: stamp,
        })
    }

    /// The entity at `key` of table `name`, unless missing or expired: awaited where the store
    /// serves point reads so, else on the blocking pool.
    async fn read_entity(
        &self,
        name: &TableName,
        key: &EntityKey,
    ) -> Result<Option<StoredEntity>, TableError> {
        let store = self.store_arc();
        if let Some(awaited) = store.awaited() {
            let mut found = None;
            let mut visit = |ttl, entity: EntityView<'_>| unexpired(ttl, entity, key, &mut found);
            awaited.get_named(name, key, &mut visit).await?;
            return Ok(found);
        }
        let (name, key) = (name.clone(), key.clone());
        let found = on_blocking_pool(move || {
            let mut found = None;
            let mut visit = |ttl, entity: EntityView<'_>| unexpired(ttl, entity, &key, &mut found);
            store.get_named(&name, &key, &mut visit)?;
            Ok(found)
        });
        Ok(found.await?)
    }
}

/// Keeps `entity` (at `key`, of a table whose entities expire after `ttl`) in `found` unless it
/// has expired.
fn unexpired(
    ttl: Option<TimeToLive>,
    entity: EntityView<'_>,
    key: &EntityKey,
    found: &mut Option<StoredEntity>,
) -> Result<(), StorageError> {
    if !entity.expired(ttl, Ticks::now())? {
        *found = Some(decode_selected(key.clone(), entity.record(), None)?);
    }
    Ok(())
}

fn internal(message: String) -> TableError {
    TableError::Storage(StorageError::Corrupt(message))
}
