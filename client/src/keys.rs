//! Key helpers for the table-design patterns: each builds row or partition keys whose byte order
//! is the order a query needs.
//!
//! And the other keys: account keys and scoped access tokens. A service holding the key file mints
//! a token for exactly what a client may touch, and the client connects with
//! [`crate::ClientBuilder::token`]:
//!
//! ```no_run
//! use trestle_client::keys::{self, Grant, KeyBounds, KeyRing, Permissions};
//!
//! # fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let ring = KeyRing::parse(&std::fs::read_to_string("trestle.keys")?)?;
//! let mut grant = Grant::new(Permissions::parse("ra")?, 900);
//! grant.table = Some("Orders".into());
//! grant.partitions = KeyBounds { start: Some("customer-42".into()), end: Some("customer-43".into()) };
//! let token = keys::mint(ring.signing_key(), &grant);
//! # Ok(()) }
//! ```

use crate::value::DateTime;

pub use trestle_proto::access::{
    mint, AccountKey, Grant, KeyBounds, KeyError, KeyRing, Permissions, TokenError,
};

/// The separator of [`compound`] keys.
pub const SEPARATOR: char = '_';
const ESCAPE: char = '~';

/// The smallest string greater than every string that starts with `prefix` ("simulating
/// StartsWith": `RowKey ge prefix and RowKey lt prefix_end(prefix)`). `None` when no such string
/// exists (the prefix is empty or made only of `char::MAX`).
///
/// ```
/// assert_eq!(trestle_client::keys::prefix_end("exp"), Some("exq".to_owned()));
/// ```
pub use trestle_proto::key_order::prefix_end;

/// A fixed-width, zero-padded number, so that key order is numeric order
/// (the guide's "convert `1` to `0000001`").
///
/// ```
/// assert_eq!(trestle_client::keys::fixed_width(42, 6), "000042");
/// ```
pub fn fixed_width(n: u64, width: usize) -> String {
    format!("{n:0width$}")
}

/// A log-tail key: the time inverted and fixed-width (19 digits), so that newer times sort
/// first and "the newest n" is the first page of an ascending scan.
pub fn inverted_timestamp(time: DateTime) -> String {
    let ticks = time.ticks().max(0) as u64;
    fixed_width(i64::MAX as u64 - ticks, 19)
}

/// The time an [`inverted_timestamp`] key was made from.
pub fn from_inverted_timestamp(key: &str) -> Option<DateTime> {
    let digits = key.get(..19)?;
    let inverted: u64 = digits.parse().ok()?;
    Some(DateTime::from_ticks(
        (i64::MAX as u64).checked_sub(inverted)? as i64,
    ))
}

/// A unique log-tail key for now: [`inverted_timestamp`], a `-`, and 16 random hex digits (36
/// characters, fixed width). Newer keys sort first; keys made in the same 100 ns tick, by any
/// number of writers, do not collide (a random 64-bit suffix), and sort among themselves at
/// random.
///
/// ```
/// use trestle_client::keys::{log_tail_id, from_inverted_timestamp};
/// let id = log_tail_id();
/// assert_eq!(id.len(), 36);
/// assert!(from_inverted_timestamp(&id).is_some());
/// ```
pub fn log_tail_id() -> String {
    log_tail_id_at(DateTime::now())
}

/// [`log_tail_id`] for `time`.
pub fn log_tail_id_at(time: DateTime) -> String {
    format!("{}-{:016x}", inverted_timestamp(time), random_suffix())
}

/// A unique key in time order for now, older first: the time's 100 ns ticks since 1601 as 19
/// digits, a `-`, and 16 random hex digits (36 characters, fixed width). The forward twin of
/// [`log_tail_id`], for keys read oldest first.
///
/// ```
/// use trestle_client::keys::time_ordered_id_at;
/// use trestle_client::DateTime;
/// let (early, late) = (DateTime::from_unix(1, 0), DateTime::from_unix(2, 0));
/// assert!(time_ordered_id_at(early) < time_ordered_id_at(late));
/// ```
pub fn time_ordered_id() -> String {
    time_ordered_id_at(DateTime::now())
}

/// [`time_ordered_id`] for `time`.
pub fn time_ordered_id_at(time: DateTime) -> String {
    // Ticks since 1601 are never negative for an Azure DateTime, so the digits sort as times do.
    let since_1601 = time.ticks().saturating_add(TICKS_1601_TO_1970).max(0) as u64;
    format!("{}-{:016x}", fixed_width(since_1601, 19), random_suffix())
}

/// 100 ns ticks from 1601-01-01 to 1970-01-01.
const TICKS_1601_TO_1970: i64 = 116_444_736_000_000_000;

fn random_suffix() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// A compound key: `parts` joined by [`SEPARATOR`], with the separator (and the escape `~`)
/// escaped inside each part, so that `("a_b", "c")` and `("a", "b_c")` never collide.
///
/// ```
/// use trestle_client::keys::{compound, split_compound};
/// let key = compound(&["exp-1", "item_7"]);
/// assert_eq!(key, "exp-1_item~u7");
/// assert_eq!(split_compound(&key), ["exp-1", "item_7"]);
/// ```
pub fn compound(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|part| escape(part))
        .collect::<Vec<_>>()
        .join(&SEPARATOR.to_string())
}

/// The prefix shared by every compound key that starts with `parts` (their "children").
pub fn compound_prefix(parts: &[&str]) -> String {
    format!("{}{SEPARATOR}", compound(parts))
}

/// The parts of a [`compound`] key.
pub fn split_compound(key: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            ESCAPE => match chars.next() {
                Some('u') => parts.last_mut().expect("a part").push(SEPARATOR),
                Some(other) => parts.last_mut().expect("a part").push(other),
                None => {}
            },
            SEPARATOR => parts.push(String::new()),
            other => parts.last_mut().expect("a part").push(other),
        }
    }
    parts
}

fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for c in part.chars() {
        match c {
            SEPARATOR => out.push_str("~u"),
            ESCAPE => out.push_str("~~"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_exactly_the_prefix() {
        let end = prefix_end("log-").unwrap();
        assert!("log-" < end.as_str() && "log-zzzz" < end.as_str() && end.as_str() <= "log.");
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".to_owned()));
        assert_eq!(prefix_end("\u{D7FF}"), Some("\u{E000}".to_owned()));
    }

    #[test]
    fn inverted_timestamps_sort_newest_first_and_round_trip() {
        let older = DateTime::from_unix(1_000, 0);
        let newer = DateTime::from_unix(2_000, 0);
        assert!(inverted_timestamp(newer) < inverted_timestamp(older));
        assert_eq!(inverted_timestamp(older).len(), 19);
        assert_eq!(
            from_inverted_timestamp(&inverted_timestamp(older)),
            Some(older)
        );
    }

    #[test]
    fn log_tail_ids_are_unique_fixed_width_and_newest_first() {
        let now = DateTime::from_unix(1_700_000_000, 0);
        let later = DateTime::from_unix(1_700_000_001, 0);
        let same_tick: std::collections::HashSet<String> =
            (0..10_000).map(|_| log_tail_id_at(now)).collect();
        assert_eq!(same_tick.len(), 10_000, "ids of one tick collided");
        assert!(same_tick.iter().all(|id| id.len() == 36));
        assert!(log_tail_id_at(later) < log_tail_id_at(now));
        assert_eq!(from_inverted_timestamp(&log_tail_id_at(now)), Some(now));
        assert!(time_ordered_id_at(now) < time_ordered_id_at(later));
        assert_eq!(time_ordered_id_at(now).len(), 36);
        let ancient = DateTime::from_unix(-11_644_473_600, 0);
        assert!(time_ordered_id_at(ancient).starts_with("0000000000000000000-"));
    }

    #[test]
    fn compound_keys_do_not_collide_and_split_back() {
        assert_ne!(compound(&["a_b", "c"]), compound(&["a", "b_c"]));
        for parts in [vec!["a_b", "c"], vec!["~", "_~u"], vec!["", ""], vec!["x"]] {
            assert_eq!(split_compound(&compound(&parts)), parts);
        }
        assert!(compound(&["e1", "i1"]).starts_with(&compound_prefix(&["e1"])));
        assert!(!compound(&["e10", "i1"]).starts_with(&compound_prefix(&["e1"])));
    }
}
