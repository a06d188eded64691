//! Azure's DateTime: 100 ns ticks, UTC, between 1601-01-01 and 9999-12-31.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Ticks (100 ns units) in one second.
pub const TICKS_PER_SECOND: i64 = trestle_proto::datetime::TICKS_PER_SECOND;
const NANOS_PER_TICK: u32 = 100;

/// A UTC instant in 100 ns ticks since the Unix epoch (negative before 1970).
///
/// Ordering is chronological; the valid Azure range is [`Ticks::MIN`]..=[`Ticks::MAX`].
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Ticks(pub i64);

impl Ticks {
    /// 1601-01-01T00:00:00Z, the earliest DateTime Azure accepts.
    pub const MIN: Ticks = Ticks(-11_644_473_600 * TICKS_PER_SECOND);
    /// 9999-12-31T23:59:59.9999999Z, the latest DateTime Azure accepts.
    pub const MAX: Ticks = Ticks(253_402_300_799 * TICKS_PER_SECOND + TICKS_PER_SECOND - 1);

    /// The current system time.
    pub fn now() -> Ticks {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ticks(
            since_epoch.as_secs() as i64 * TICKS_PER_SECOND
                + i64::from(since_epoch.subsec_nanos() / NANOS_PER_TICK),
        )
    }

    /// The timestamp of a commit starting now: the system clock, made strictly increasing within
    /// the process, so that two commits of one server never share a timestamp. Every store stamps
    /// with it; across servers, an entity's timestamp still increases, since a commit stamps an
    /// entity at least one tick after its previous timestamp ([`crate::model::Operation::resolve`]).
    pub fn next_commit() -> Ticks {
        static LAST: AtomicI64 = AtomicI64::new(i64::MIN);
        let now = Ticks::now().0;
        let previous = LAST
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last.saturating_add(1)))
            })
            .unwrap_or_else(|last| last);
        Ticks(now.max(previous.saturating_add(1)))
    }

    /// From Unix seconds and nanoseconds (0..1e9), truncating to 100 ns. `None` when the nanos are
    /// out of range or the instant is outside [`Ticks::MIN`]..=[`Ticks::MAX`].
    pub fn from_unix(seconds: i64, nanos: i32) -> Option<Ticks> {
        let nanos = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
        let ticks = seconds
            .checked_mul(TICKS_PER_SECOND)?
            .checked_add(i64::from(nanos / NANOS_PER_TICK))?;
        let ticks = Ticks(ticks);
        (Ticks::MIN..=Ticks::MAX).contains(&ticks).then_some(ticks)
    }

    /// Unix seconds and nanoseconds, as `google.protobuf.Timestamp` wants them.
    pub fn to_unix(self) -> (i64, i32) {
        let seconds = self.0.div_euclid(TICKS_PER_SECOND);
        let ticks = self.0.rem_euclid(TICKS_PER_SECOND);
        (seconds, (ticks as i32) * NANOS_PER_TICK as i32)
    }

    /// ISO 8601 with seven fractional digits, as Azure prints it: `2013-08-22T01:12:06.2608595Z`.
    pub fn to_rfc3339(self) -> String {
        trestle_proto::datetime::format(self.0)
    }

    /// Parses Azure's ISO 8601 UTC form (up to 7 fractional digits); `None` if malformed or
    /// outside [`Ticks::MIN`]..=[`Ticks::MAX`].
    pub fn parse_rfc3339(text: &str) -> Option<Ticks> {
        let ticks = Ticks(trestle_proto::datetime::parse(text)?);
        (Ticks::MIN..=Ticks::MAX).contains(&ticks).then_some(ticks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_azure_range_ends() {
        assert_eq!(Ticks::MIN.to_rfc3339(), "1601-01-01T00:00:00.0000000Z");
        assert_eq!(Ticks::MAX.to_rfc3339(), "9999-12-31T23:59:59.9999999Z");
        assert_eq!(Ticks(0).to_rfc3339(), "1970-01-01T00:00:00.0000000Z");
    }

    #[test]
    fn unix_round_trip_truncates_to_100ns() {
        let ticks = Ticks::from_unix(1_700_000_000, 123_456_789).unwrap();
        assert_eq!(ticks.to_unix(), (1_700_000_000, 123_456_700));
        let before_epoch = Ticks::from_unix(-1, 999_999_900).unwrap();
        assert_eq!(before_epoch.to_unix(), (-1, 999_999_900));
        assert_eq!(before_epoch.to_rfc3339(), "1969-12-31T23:59:59.9999999Z");
    }

    #[test]
    fn commit_timestamps_strictly_increase() {
        let mut last = Ticks::next_commit();
        for _ in 0..10_000 {
            let next = Ticks::next_commit();
            assert!(next > last, "{next:?} after {last:?}");
            last = next;
        }
    }

    #[test]
    fn rejects_out_of_range_instants() {
        let (min_seconds, _) = Ticks::MIN.to_unix();
        assert!(Ticks::from_unix(min_seconds, 0).is_some());
        assert!(Ticks::from_unix(min_seconds - 1, 999_999_999).is_none());
        assert!(Ticks::from_unix(253_402_300_800, 0).is_none());
        assert!(Ticks::from_unix(0, -1).is_none());
        assert!(Ticks::from_unix(0, 1_000_000_000).is_none());
    }
}
