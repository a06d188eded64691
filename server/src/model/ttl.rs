//! Time to live: when an entity of a table that lets entities expire does. An entity's own
//! `TimeToLive` property (an Int32 or Int64 count of seconds, or -1 for never) or else the table's
//! default counts from the entity's Timestamp, so each write starts the count again (Cosmos DB's
//! `ttl`). An expired entity is invisible to every read and missing to every write until the
//! server removes it.

use super::{Properties, Ticks, ValidationError, Value, ValueRef, TICKS_PER_SECOND};

/// The property an entity sets its own time to live with.
pub const TTL_PROPERTY: &str = "TimeToLive";
/// The longest time to live: ten years.
pub const MAX_TTL_SECONDS: u64 = 10 * 365 * 24 * 60 * 60;

/// A table's expiry rule (present only when the table lets entities expire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeToLive {
    /// Seconds an entity without its own `TimeToLive` lives; `None`: such entities never expire.
    pub default_seconds: Option<u64>,
}

impl TimeToLive {
    /// When an entity stamped `timestamp` whose `TimeToLive` property is `own` expires, if ever.
    pub fn expiry(&self, timestamp: Ticks, own: Option<ValueRef<'_>>) -> Option<Ticks> {
        let seconds = match own.and_then(seconds_of) {
            Some(Lifetime::Never) => return None,
            Some(Lifetime::Seconds(seconds)) => seconds,
            None => self.default_seconds?,
        };
        let ticks = i64::try_from(seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(TICKS_PER_SECOND);
        Some(Ticks(timestamp.0.saturating_add(ticks)))
    }

    /// Whether that entity has expired at `now`.
    pub fn expired(&self, timestamp: Ticks, own: Option<ValueRef<'_>>, now: Ticks) -> bool {
        self.expiry(timestamp, own)
            .is_some_and(|expiry| expiry <= now)
    }
}

enum Lifetime {
    Never,
    Seconds(u64),
}

fn seconds_of(value: ValueRef<'_>) -> Option<Lifetime> {
    let n = match value {
        ValueRef::Int32(n) => i64::from(n),
        ValueRef::Int64(n) => n,
        _ => return None,
    };
    match n {
        -1 => Some(Lifetime::Never),
        1.. => Some(Lifetime::Seconds(n as u64)),
        _ => None,
    }
}

/// Refuses an entity of a table with a time to live whose `TimeToLive` is not an Int32 or Int64
/// of -1 (never) or 1 to [`MAX_TTL_SECONDS`].
pub fn validate_own_ttl(properties: &Properties) -> Result<(), ValidationError> {
    let Some(value) = properties.get(TTL_PROPERTY) else {
        return Ok(());
    };
    let n = match value {
        Value::Int32(n) => i64::from(*n),
        Value::Int64(n) => *n,
        _ => i64::MIN,
    };
    if n == -1 || (1..=MAX_TTL_SECONDS as i64).contains(&n) {
        return Ok(());
    }
    Err(ValidationError::Argument(format!(
        "{TTL_PROPERTY} is an Int32 or Int64 of seconds, 1 to {MAX_TTL_SECONDS}, or -1 for never; \
         not {value:?}"
    )))
}

/// A table's default time to live from a request (`0`: none), or why it cannot be.
pub fn default_ttl(seconds: u64) -> Result<Option<u64>, ValidationError> {
    match seconds {
        0 => Ok(None),
        1..=MAX_TTL_SECONDS => Ok(Some(seconds)),
        _ => Err(ValidationError::Argument(format!(
            "a default time to live is 1 to {MAX_TTL_SECONDS} seconds (or 0 for none), not {seconds}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_ttl_wins_and_counts_from_the_timestamp() {
        let second = TICKS_PER_SECOND;
        let ttl = TimeToLive {
            default_seconds: Some(10),
        };
        let at = Ticks(1_000 * second);
        assert_eq!(ttl.expiry(at, None), Some(Ticks(1_010 * second)));
        assert_eq!(
            ttl.expiry(at, Some(ValueRef::Int32(2))),
            Some(Ticks(1_002 * second))
        );
        assert_eq!(ttl.expiry(at, Some(ValueRef::Int64(-1))), None);
        assert!(ttl.expired(at, Some(ValueRef::Int32(2)), Ticks(1_002 * second)));
        assert!(!ttl.expired(at, None, Ticks(1_009 * second)));
        let no_default = TimeToLive {
            default_seconds: None,
        };
        assert_eq!(no_default.expiry(at, None), None);
        assert_eq!(no_default.expiry(at, Some(ValueRef::String("5"))), None);
    }

    #[test]
    fn only_whole_seconds_or_never_are_taken() {
        let with = |value: Value| Properties::from([(TTL_PROPERTY.to_owned(), value)]);
        for good in [Value::Int32(-1), Value::Int32(1), Value::Int64(3_600)] {
            assert!(validate_own_ttl(&with(good)).is_ok());
        }
        for bad in [
            Value::Int32(0),
            Value::Int32(-2),
            Value::Int64(MAX_TTL_SECONDS as i64 + 1),
            Value::String("60".into()),
            Value::Double(1.5),
        ] {
            assert!(validate_own_ttl(&with(bad)).is_err());
        }
        assert!(validate_own_ttl(&Properties::new()).is_ok());
        assert_eq!(default_ttl(0).unwrap(), None);
        assert!(default_ttl(MAX_TTL_SECONDS + 1).is_err());
    }
}
