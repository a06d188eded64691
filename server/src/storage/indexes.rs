//! What every store shares about declared indexes: the catalog record of a table's indexes (one
//! format for both stores), an entry computed from an entity read in place, and the background
//! build that fills a new index over a populated table a step at a time.

use std::sync::Arc;
use std::time::Duration;

use super::{EntityView, StorageError, Table};
use crate::model::encoding::Reader;
use crate::model::{
    ChangeFeed, Index, IndexDefinition, IndexScope, IndexState, KeyPosition, PlanRules, TimeToLive,
};

const CATALOG_V1: u8 = 1;
/// The sections a catalog may end with, each a tag and a u64: the table keeps a change feed (its
/// retention follows), whose records hold before images (1 follows), lets entities expire (its
/// default time to live follows, 0 for none).
const CHANGE_FEED_ON: u8 = 0xCF;
const BEFORE_IMAGES_ON: u8 = 0xBF;
const TIME_TO_LIVE_ON: u8 = 0x7C;

/// A table's indexes, and those dropped whose entries are still being reclaimed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexCatalog {
    /// The declared indexes, in declaration order.
    pub indexes: Vec<Index>,
    /// Ids of dropped indexes whose entries are not all removed yet.
    pub dropped: Vec<u64>,
    /// The change feed, if each commit writes a change record of each entity it changes
    /// (`storage::changes`): kept here, with the indexes, because every commit reads both.
    pub change_feed: Option<ChangeFeed>,
    /// When entities expire, if the table lets them (`model::ttl`).
    pub time_to_live: Option<TimeToLive>,
}

/// A change of the settings a table's catalog keeps beside its indexes: each one given is set
/// (`Some(None)`: off), the other left as it is. A store writes it in one change of the catalog,
/// so a commit sees all of it or none; a table is created with one ([`super::Store::create_table`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettingsChange {
    /// The change feed: kept as given, or not kept.
    pub change_feed: Option<Option<ChangeFeed>>,
    /// Expiry: as given, or none.
    pub time_to_live: Option<Option<TimeToLive>>,
}

impl SettingsChange {
    /// `catalog` with the change made.
    pub fn apply(&self, catalog: &mut IndexCatalog) {
        if let Some(feed) = self.change_feed {
            catalog.change_feed = feed;
        }
        if let Some(ttl) = self.time_to_live {
            catalog.time_to_live = ttl;
        }
    }
}

/// Why an index cannot be declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexRefusal {
    /// The table has an index of that name (ignoring case).
    AlreadyExists,
    /// The table has [`crate::model::MAX_INDEXES_PER_TABLE`] indexes.
    TooMany,
    /// The table was deleted meanwhile.
    TableGone,
}

impl IndexCatalog {
    /// The index called `name` (ignoring case).
    pub fn find(&self, name: &str) -> Option<&Index> {
        self.indexes
            .iter()
            .find(|index| index.definition.name.eq_ignore_ascii_case(name))
    }

    /// Adds `definition` as index `id` in `state`, unless the name is taken or the table is full.
    pub fn declare(
        &mut self,
        id: u64,
        definition: IndexDefinition,
        state: IndexState,
    ) -> Result<Index, IndexRefusal> {
        if self.find(&definition.name).is_some() {
            return Err(IndexRefusal::AlreadyExists);
        }
        if self.indexes.len() >= crate::model::MAX_INDEXES_PER_TABLE {
            return Err(IndexRefusal::TooMany);
        }
        let index = Index {
            id,
            definition,
            state,
        };
        self.indexes.push(index.clone());
        Ok(index)
    }

    /// Drops the index called `name`: its id, if there was one, joins `dropped`.
    pub fn drop_index(&mut self, name: &str) -> Option<u64> {
        let at = self
            .indexes
            .iter()
            .position(|index| index.definition.name.eq_ignore_ascii_case(name))?;
        let id = self.indexes.remove(at).id;
        self.dropped.push(id);
        Some(id)
    }

    /// Sets the state of index `id`; `false` if it was dropped meanwhile.
    pub fn set_state(&mut self, id: u64, state: IndexState) -> bool {
        match self.indexes.iter_mut().find(|index| index.id == id) {
            Some(index) => {
                index.state = state;
                true
            }
            None => false,
        }
    }

    /// The record: `[version u8 = 1][index count u8]`, per index `[id u64 BE][scope u8][unique
    /// u8][state u8][failure: u16 LE length, UTF-8][name: u8 length][property count u8]`, per
    /// property `[u16 LE length][name]`, then `[dropped count u32 LE][id u64 BE]...`, then
    /// `[0xCF][retention in seconds: u64 LE]` if the table keeps a change feed, `[0xBF][1: u64 LE]`
    /// if its records hold before images, and `[0x7C][default time to live in seconds, 0 for none:
    /// u64 LE]` if it lets entities expire (older records end before them).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![CATALOG_V1, self.indexes.len() as u8];
        for index in &self.indexes {
            let definition = &index.definition;
            out.extend_from_slice(&index.id.to_be_bytes());
            out.push(match definition.scope {
                IndexScope::Partition => 0,
                IndexScope::Table => 1,
            });
            out.push(u8::from(definition.unique));
            let failure = match &index.state {
                IndexState::Building => {
                    out.push(0);
                    ""
                }
                IndexState::Ready => {
                    out.push(1);
                    ""
                }
                IndexState::Failed(why) => {
                    out.push(2);
                    why.as_str()
                }
            };
            put_text(&mut out, failure);
            out.push(definition.name.len() as u8);
            out.extend_from_slice(definition.name.as_bytes());
            out.push(definition.properties.len() as u8);
            for property in &definition.properties {
                put_text(&mut out, property);
            }
        }
        out.extend_from_slice(&(self.dropped.len() as u32).to_le_bytes());
        for id in &self.dropped {
            out.extend_from_slice(&id.to_be_bytes());
        }
        if let Some(feed) = self.change_feed {
            out.push(CHANGE_FEED_ON);
            out.extend_from_slice(&feed.retention_seconds.to_le_bytes());
            if feed.before_images {
                out.push(BEFORE_IMAGES_ON);
                out.extend_from_slice(&1u64.to_le_bytes());
            }
        }
        if let Some(ttl) = self.time_to_live {
            out.push(TIME_TO_LIVE_ON);
            out.extend_from_slice(&ttl.default_seconds.unwrap_or(0).to_le_bytes());
        }
        out
    }

    /// Reads a record [`IndexCatalog::encode`] wrote; an empty record is an empty catalog.
    pub fn decode(bytes: &[u8]) -> Result<IndexCatalog, StorageError> {
        if bytes.is_empty() {
            return Ok(IndexCatalog::default());
        }
        let corrupt = || StorageError::Corrupt("unreadable index catalog".into());
        let mut reader = Reader::new(bytes, "index catalog");
        let [version, count] = reader.take::<2>()?;
        if version != CATALOG_V1 {
            return Err(corrupt());
        }
        let mut catalog = IndexCatalog::default();
        for _ in 0..count {
            let id = u64::from_be_bytes(reader.take::<8>()?);
            let [scope, unique, state] = reader.take::<3>()?;
            let failure = take_text(&mut reader)?;
            let [name_len] = reader.take::<1>()?;
            let name = utf8(reader.slice(usize::from(name_len))?)?;
            let [property_count] = reader.take::<1>()?;
            let properties = (0..property_count)
                .map(|_| take_text(&mut reader))
                .collect::<Result<Vec<_>, _>>()?;
            let scope = match scope {
                0 => IndexScope::Partition,
                1 => IndexScope::Table,
                _ => return Err(corrupt()),
            };
            let state = match state {
                0 => IndexState::Building,
                1 => IndexState::Ready,
                2 => IndexState::Failed(failure),
                _ => return Err(corrupt()),
            };
            catalog.indexes.push(Index {
                id,
                definition: IndexDefinition {
                    name,
                    properties,
                    scope,
                    unique: unique == 1,
                },
                state,
            });
        }
        let dropped = u32::from_le_bytes(reader.take::<4>()?);
        for _ in 0..dropped {
            catalog
                .dropped
                .push(u64::from_be_bytes(reader.take::<8>()?));
        }
        while !reader.is_empty() {
            let [section] = reader.take::<1>()?;
            let seconds = u64::from_le_bytes(reader.take::<8>()?);
            match section {
                CHANGE_FEED_ON => {
                    catalog.change_feed = Some(ChangeFeed {
                        retention_seconds: seconds,
                        before_images: false,
                    });
                }
                BEFORE_IMAGES_ON => match &mut catalog.change_feed {
                    Some(feed) if seconds == 1 => feed.before_images = true,
                    _ => return Err(corrupt()),
                },
                TIME_TO_LIVE_ON => {
                    catalog.time_to_live = Some(TimeToLive {
                        default_seconds: (seconds > 0).then_some(seconds),
                    });
                }
                _ => return Err(corrupt()),
            }
        }
        Ok(catalog)
    }

    /// Whether writes keep any index.
    pub fn any_kept(&self) -> bool {
        self.indexes.iter().any(Index::is_kept)
    }

    /// Whether a commit plans over the current rows' every property (for the indexes it keeps,
    /// or to tell whether a row has expired), not only over those its operations need.
    pub fn reads_rows_whole(&self) -> bool {
        self.any_kept() || self.time_to_live.is_some() || self.keeps_before_images()
    }

    /// Whether the table needs the housekeeping: a change feed to trim, or entities that expire.
    pub fn needs_upkeep(&self) -> bool {
        self.change_feed.is_some() || self.time_to_live.is_some()
    }

    /// Whether the table's change records hold the entity as it was before each change.
    pub fn keeps_before_images(&self) -> bool {
        self.change_feed.is_some_and(|feed| feed.before_images)
    }

    /// What a commit on the table plans by ([`crate::model::plan_commit`]).
    pub fn plan_rules(&self) -> PlanRules<'_> {
        PlanRules {
            indexes: &self.indexes,
            time_to_live: self.time_to_live,
            before_images: self.keeps_before_images(),
        }
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn take_text(reader: &mut Reader<'_>) -> Result<String, StorageError> {
    let len = u16::from_le_bytes(reader.take::<2>()?);
    utf8(reader.slice(usize::from(len))?)
}

fn utf8(bytes: &[u8]) -> Result<String, StorageError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| StorageError::Corrupt("index catalog text is not UTF-8".into()))
}

/// The sort keys of `entity`'s entries in `index`, read in place, in order (none if it lacks an
/// indexed value; several for a multi-valued index). An entity with more entries than an index
/// keeps (written before the index was declared) is [`StorageError::Unindexable`].
pub fn entity_sort_keys(
    index: &Index,
    entity: &EntityView<'_>,
) -> Result<Vec<Vec<u8>>, StorageError> {
    let mut values = Vec::with_capacity(index.definition.properties.len());
    for path in &index.definition.properties {
        let property = path.split('/').next().unwrap_or_default();
        match entity.property(property)? {
            Some(value) => values.push((property, value)),
            None => return Ok(Vec::new()),
        }
    }
    index
        .definition
        .sort_keys(entity.partition_key, entity.row_key, |name| {
            values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        })
        .map_err(|too_many| StorageError::Unindexable(too_many.to_string()))
}

/// What one step of an index build did.
#[derive(Debug)]
pub enum BuildStep {
    /// Entries were added; the next step starts here (`None`: every entity is covered).
    Next(Option<KeyPosition>),
    /// A unique index met two entities with the same values: why, to report.
    Conflict(String),
}

/// Pause between build steps when a step failed (a database fault), before trying again.
const BUILD_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Builds index `index_id` of `table` on a thread of its own: steps over the table's entities
/// until every one is covered, then marks the index `Ready` (or `Failed` at a unique conflict).
/// Writes keep the index meanwhile, so the build only adds entries for entities it finds; a build
/// stopped by a crash is started again, from the start, when the store opens.
pub fn build_in_background(table: Arc<dyn Table>, index_id: u64) {
    let spawned = std::thread::Builder::new()
        .name("trestle-index-build".into())
        .spawn(move || {
            let mut from = None;
            loop {
                match table.build_index(index_id, from.clone()) {
                    Ok(BuildStep::Next(Some(next))) => from = Some(next),
                    Ok(BuildStep::Next(None)) => {
                        finish(table.as_ref(), index_id, IndexState::Ready);
                        return;
                    }
                    Ok(BuildStep::Conflict(why)) => {
                        finish(table.as_ref(), index_id, IndexState::Failed(why));
                        return;
                    }
                    Err(StorageError::IndexGone) => return,
                    // What no retry changes: an entity that cannot be read or indexed.
                    Err(error @ (StorageError::Corrupt(_) | StorageError::Unindexable(_))) => {
                        let why = format!("the build met an entity it cannot index: {error}");
                        finish(table.as_ref(), index_id, IndexState::Failed(why));
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%error, index_id, "an index build step failed; trying again");
                        std::thread::sleep(BUILD_RETRY_PAUSE);
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, index_id, "cannot start an index build");
    }
}

fn finish(table: &dyn Table, index_id: u64, state: IndexState) {
    loop {
        match table.set_index_state(index_id, state.clone()) {
            Ok(()) => {
                tracing::info!(table = %table.name(), index_id, ?state, "an index build ended");
                crate::telemetry::background_done("index_build");
                return;
            }
            Err(StorageError::IndexGone) => return,
            Err(error) => {
                tracing::warn!(%error, index_id, "recording an index build's end failed; trying again");
                std::thread::sleep(BUILD_RETRY_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogs_round_trip() {
        let mut catalog = IndexCatalog::default();
        let definition = |name: &str, scope, unique| {
            IndexDefinition::new(name.into(), vec!["A".into(), "B".into()], scope, unique).unwrap()
        };
        catalog
            .declare(
                7,
                definition("ByA", IndexScope::Table, true),
                IndexState::Ready,
            )
            .unwrap();
        catalog
            .declare(
                9,
                definition("ByB", IndexScope::Partition, false),
                IndexState::Building,
            )
            .unwrap();
        assert_eq!(
            catalog.declare(
                10,
                definition("bya", IndexScope::Table, false),
                IndexState::Ready
            ),
            Err(IndexRefusal::AlreadyExists)
        );
        catalog.set_state(9, IndexState::Failed("two entities share x".into()));
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        assert_eq!(catalog.drop_index("BYA"), Some(7));
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        assert_eq!(IndexCatalog::decode(&[]).unwrap(), IndexCatalog::default());
        // The change feed's and the time to live's sections, alone and together.
        let older = catalog.encode();
        catalog.change_feed = Some(ChangeFeed {
            retention_seconds: 60,
            before_images: false,
        });
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        catalog.change_feed = Some(ChangeFeed {
            retention_seconds: 60,
            before_images: true,
        });
        assert!(catalog.reads_rows_whole());
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        catalog.time_to_live = Some(TimeToLive {
            default_seconds: Some(3600),
        });
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        catalog.change_feed = None;
        catalog.time_to_live = Some(TimeToLive {
            default_seconds: None,
        });
        assert_eq!(IndexCatalog::decode(&catalog.encode()).unwrap(), catalog);
        let mut unknown = older.clone();
        unknown.extend_from_slice(&[0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(IndexCatalog::decode(&unknown).is_err());
        let mut before_images_without_a_feed = older.clone();
        before_images_without_a_feed.extend_from_slice(&[BEFORE_IMAGES_ON, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert!(IndexCatalog::decode(&before_images_without_a_feed).is_err());
        assert!(IndexCatalog::decode(&[1, 1, 0]).is_err());
    }
}
