//! A table's settings in one value: its change feed and expiry changed together in one call
//! ([`TableClient::set_settings`], one change on the server, so every commit sees both), or
//! given, with its indexes, when the table is created ([`TableClient::create_with`]).

use trestle_proto::pb;

use crate::{FeedSettings, IndexDefinition, Result, TableClient};

/// What to set of a table's settings: each one named is set, the others left as they are.
///
/// ```no_run
/// # async fn example(orders: trestle_client::TableClient) -> trestle_client::Result<()> {
/// use trestle_client::{FeedSettings, IndexDefinition, TableSettings};
/// let settings = TableSettings::new()
///     .index(IndexDefinition::table("BySeller", ["Seller"]))
///     .change_feed(FeedSettings { retention_seconds: 7 * 86_400, before_images: true })
///     .time_to_live(0);
/// orders.create_with(settings).await?;
/// // Later, in one change: no expiry, and the feed kept a day.
/// let change = TableSettings::new()
///     .no_time_to_live()
///     .change_feed(FeedSettings { retention_seconds: 86_400, before_images: true });
/// orders.set_settings(change).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "settings change nothing until sent"]
pub struct TableSettings {
    indexes: Vec<IndexDefinition>,
    change_feed: Option<Option<FeedSettings>>,
    time_to_live: Option<Option<u64>>,
}

impl TableSettings {
    /// Nothing to set yet.
    pub fn new() -> TableSettings {
        TableSettings::default()
    }

    /// An index to declare with the table ([`TableClient::create_with`] only: on a table that
    /// exists, [`TableClient::create_index`] builds one over its entities).
    pub fn index(mut self, index: IndexDefinition) -> TableSettings {
        self.indexes.push(index);
        self
    }

    /// Keep a change feed as `settings` say.
    pub fn change_feed(mut self, settings: FeedSettings) -> TableSettings {
        self.change_feed = Some(Some(settings));
        self
    }

    /// Keep no change feed.
    pub fn no_change_feed(mut self) -> TableSettings {
        self.change_feed = Some(None);
        self
    }

    /// Let entities expire: each after its own `TimeToLive` property's seconds, or else
    /// `default_seconds` after its last write (0: only those that set their own expire).
    pub fn time_to_live(mut self, default_seconds: u64) -> TableSettings {
        self.time_to_live = Some(Some(default_seconds));
        self
    }

    /// Let no entity expire.
    pub fn no_time_to_live(mut self) -> TableSettings {
        self.time_to_live = Some(None);
        self
    }
}

impl TableClient {
    /// Creates the table with `settings`: its indexes (ready at once), change feed and expiry,
    /// all in place before its first write.
    ///
    /// # Errors
    /// `is_conflict()` if the table exists; `InvalidInput` for a bad setting (nothing is
    /// created).
    pub async fn create_with(&self, settings: TableSettings) -> Result<()> {
        let feed = settings.change_feed.flatten();
        let ttl = settings.time_to_live.flatten();
        let request = pb::CreateTableRequest {
            table: self.name().to_owned(),
            indexes: settings
                .indexes
                .iter()
                .map(IndexDefinition::to_wire)
                .collect(),
            change_feed: feed.is_some(),
            change_feed_retention_seconds: feed.map_or(0, |feed| feed.retention_seconds),
            change_feed_before_images: feed.is_some_and(|feed| feed.before_images),
            time_to_live: ttl.is_some(),
            default_time_to_live_seconds: ttl.unwrap_or(0),
        };
        self.client
            .write(request, |mut c, r| async move { c.create_table(r).await })
            .await?;
        Ok(())
    }

    /// Sets the table's change feed and expiry as `settings` name them, in one change: every
    /// read and commit after it sees both.
    ///
    /// # Errors
    /// `InvalidInput` for a bad setting, or for indexes (declare them with
    /// [`TableClient::create_index`]): nothing changes; `TableNotFound`.
    pub async fn set_settings(&self, settings: TableSettings) -> Result<()> {
        if !settings.indexes.is_empty() {
            return Err(crate::Error::invalid(
                "set_settings changes a table's feed and expiry: declare an index with create_index",
            ));
        }
        let request = pb::SetTableSettingsRequest {
            table: self.name().to_owned(),
            change_feed: settings.change_feed.map(|feed| pb::ChangeFeedSetting {
                enabled: feed.is_some(),
                retention_seconds: feed.map_or(0, |feed| feed.retention_seconds),
                before_images: feed.is_some_and(|feed| feed.before_images),
            }),
            time_to_live: settings.time_to_live.map(|ttl| pb::TimeToLiveSetting {
                enabled: ttl.is_some(),
                default_seconds: ttl.unwrap_or(0),
            }),
        };
        self.client
            .write(
                request,
                |mut c, r| async move { c.set_table_settings(r).await },
            )
            .await?;
        Ok(())
    }
}
