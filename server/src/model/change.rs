//! What a change feed says of a committed change: its kind, decided by the commit planner from
//! the operation and the row it found.

/// How long a change feed keeps its records unless told: a day, as DynamoDB Streams do.
pub const DEFAULT_FEED_RETENTION_SECONDS: u64 = 24 * 60 * 60;
/// The longest a change feed keeps its records: 30 days.
pub const MAX_FEED_RETENTION_SECONDS: u64 = 30 * 24 * 60 * 60;

/// A change feed's retention from a request (`0`: the default), or why it cannot be.
pub fn feed_retention(seconds: u64) -> Result<u64, super::ValidationError> {
    match seconds {
        0 => Ok(DEFAULT_FEED_RETENTION_SECONDS),
        1..=MAX_FEED_RETENTION_SECONDS => Ok(seconds),
        _ => Err(super::ValidationError::Argument(format!(
            "a change feed's retention is 1 to {MAX_FEED_RETENTION_SECONDS} seconds (30 days), \
             not {seconds}"
        ))),
    }
}

/// What a table's change feed keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeFeed {
    /// How long each record is kept, in seconds.
    pub retention_seconds: u64,
    /// Each record holds the entity as it was before the change too (DynamoDB's
    /// `NEW_AND_OLD_IMAGES`).
    pub before_images: bool,
}

impl ChangeFeed {
    /// The feed a request asks for (`retention_seconds` 0: a day), or why it cannot be.
    pub fn new(
        retention_seconds: u64,
        before_images: bool,
    ) -> Result<ChangeFeed, super::ValidationError> {
        Ok(ChangeFeed {
            retention_seconds: feed_retention(retention_seconds)?,
            before_images,
        })
    }
}

/// How a commit changed an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// It did not exist; now it does.
    Insert,
    /// It was replaced whole (an update, or an upsert replacing).
    Replace,
    /// Properties were merged into it (a merge, or an upsert merging).
    Merge,
    /// Patch steps changed it (or, with `upsert`, made it).
    Patch,
    /// It was deleted.
    Delete,
    /// Its time to live ran out, and the server removed it.
    Expire,
}

impl ChangeKind {
    /// Every kind, in the order of their codes.
    pub const ALL: [ChangeKind; 6] = [
        ChangeKind::Insert,
        ChangeKind::Replace,
        ChangeKind::Merge,
        ChangeKind::Patch,
        ChangeKind::Delete,
        ChangeKind::Expire,
    ];

    /// The kind's code in a stored record (1-based).
    pub fn code(self) -> u8 {
        ChangeKind::ALL
            .iter()
            .position(|kind| *kind == self)
            .map_or(0, |at| at as u8 + 1)
    }

    /// The kind of `code`, if it names one.
    pub fn from_code(code: u8) -> Option<ChangeKind> {
        ChangeKind::ALL
            .get(usize::from(code).checked_sub(1)?)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for kind in ChangeKind::ALL {
            assert_eq!(ChangeKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(ChangeKind::from_code(0), None);
        assert_eq!(ChangeKind::from_code(7), None);
    }
}
