//! Property values: the eight Azure Table types, documents nesting them (objects and arrays), a
//! DateTime with Azure's 100 ns precision, and a dynamic property map with typed accessors.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// A UTC instant with 100 ns precision, between 1601-01-01 and 9999-12-31 (Azure's DateTime).
///
/// In a struct it is stored as an `Edm.DateTime` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DateTime {
    /// 100 ns ticks since 1970-01-01T00:00:00Z (negative before).
    ticks: i64,
}

const TICKS_PER_SECOND: i64 = 10_000_000;

impl DateTime {
    /// The current time.
    pub fn now() -> DateTime {
        DateTime::from(SystemTime::now())
    }

    /// From 100 ns ticks since the Unix epoch.
    pub fn from_ticks(ticks: i64) -> DateTime {
        DateTime { ticks }
    }

    /// 100 ns ticks since the Unix epoch.
    pub fn ticks(self) -> i64 {
        self.ticks
    }

    /// From Unix seconds and nanoseconds (truncated to 100 ns).
    pub fn from_unix(seconds: i64, nanos: u32) -> DateTime {
        DateTime {
            ticks: seconds * TICKS_PER_SECOND + i64::from(nanos / 100),
        }
    }

    /// Unix seconds and nanoseconds.
    pub fn to_unix(self) -> (i64, u32) {
        (
            self.ticks.div_euclid(TICKS_PER_SECOND),
            (self.ticks.rem_euclid(TICKS_PER_SECOND) * 100) as u32,
        )
    }

    /// RFC 3339 text in UTC with all seven digits of 100 ns, as Azure writes it (also what
    /// `Display` shows).
    ///
    /// ```
    /// use trestle_client::DateTime;
    /// let t = DateTime::from_unix(1_700_000_000, 123_456_700);
    /// assert_eq!(t.to_rfc3339(), "2023-11-14T22:13:20.1234567Z");
    /// assert_eq!(t.to_string(), t.to_rfc3339());
    /// assert_eq!(DateTime::parse_rfc3339("2023-11-14T22:13:20.1234567Z"), Some(t));
    /// ```
    pub fn to_rfc3339(self) -> String {
        trestle_proto::datetime::format(self.ticks)
    }

    /// Parses RFC 3339 text in UTC (`Z`), with up to seven fractional digits; `None` if it is not
    /// that.
    pub fn parse_rfc3339(text: &str) -> Option<DateTime> {
        trestle_proto::datetime::parse(text).map(DateTime::from_ticks)
    }
}

impl std::fmt::Display for DateTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// Text that is not an RFC 3339 UTC time ([`DateTime`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 UTC time such as 2024-01-02T03:04:05.1234567Z")]
pub struct DateTimeParseError(String);

impl std::str::FromStr for DateTime {
    type Err = DateTimeParseError;

    /// Parses RFC 3339 text ([`DateTime::parse_rfc3339`]).
    fn from_str(text: &str) -> Result<DateTime, DateTimeParseError> {
        DateTime::parse_rfc3339(text).ok_or_else(|| DateTimeParseError(text.to_owned()))
    }
}

impl From<SystemTime> for DateTime {
    fn from(time: SystemTime) -> DateTime {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => DateTime::from_unix(after.as_secs() as i64, after.subsec_nanos()),
            Err(before) => {
                let before = before.duration();
                DateTime {
                    ticks: -(before.as_secs() as i64 * TICKS_PER_SECOND
                        + i64::from(before.subsec_nanos() / 100)),
                }
            }
        }
    }
}

impl From<DateTime> for SystemTime {
    fn from(time: DateTime) -> SystemTime {
        let (seconds, nanos) = time.to_unix();
        if seconds >= 0 {
            UNIX_EPOCH + Duration::new(seconds as u64, nanos)
        } else {
            UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
                + Duration::from_nanos(u64::from(nanos))
        }
    }
}

/// One typed property value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Edm.String.
    String(String),
    /// Edm.Int32.
    Int32(i32),
    /// Edm.Int64.
    Int64(i64),
    /// Edm.Double.
    Double(f64),
    /// Edm.Boolean.
    Bool(bool),
    /// Edm.DateTime.
    DateTime(DateTime),
    /// Edm.Guid.
    Guid(Uuid),
    /// Edm.Binary.
    Binary(Vec<u8>),
    /// Null: only inside a document (a property is never null; leave it out instead).
    Null,
    /// A document's object: members by name (1 to 255 characters, no `/`). Trestle's own type.
    Object(BTreeMap<String, Value>),
    /// A document's array. Trestle's own type.
    Array(Vec<Value>),
}

impl Value {
    /// The value at the end of `path` inside a document: member names separated by `/`, element
    /// indexes in arrays (`Addresses/0/City`); the value itself for an empty path.
    ///
    /// ```
    /// use trestle_client::Value;
    /// let person = Value::Object([(
    ///     "Addresses".to_owned(),
    ///     Value::Array(vec![Value::Object([("City".to_owned(), Value::from("Seattle"))].into())]),
    /// )].into());
    /// assert_eq!(person.at("Addresses/0/City"), Some(&Value::from("Seattle")));
    /// assert_eq!(person.at("Addresses/1/City"), None);
    /// ```
    pub fn at(&self, path: &str) -> Option<&Value> {
        path.split('/')
            .filter(|step| !step.is_empty())
            .try_fold(self, |value, step| match value {
                Value::Object(members) => members.get(step),
                Value::Array(elements) => elements.get(step.parse::<usize>().ok()?),
                _ => None,
            })
    }
}

impl From<Vec<Value>> for Value {
    fn from(elements: Vec<Value>) -> Value {
        Value::Array(elements)
    }
}

impl From<BTreeMap<String, Value>> for Value {
    fn from(members: BTreeMap<String, Value>) -> Value {
        Value::Object(members)
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(v.into())
            }
        })*
    };
}

// Every Rust integer that fits, with the EDM type the serde mapping gives it (`u32` is Int64, as a
// struct field of that type is stored).
value_from!(String => String, &str => String, i8 => Int32, i16 => Int32, i32 => Int32, u8 => Int32,
    u16 => Int32, u32 => Int64, i64 => Int64, f32 => Double, f64 => Double, bool => Bool,
    DateTime => DateTime, Uuid => Guid, Vec<u8> => Binary, &[u8] => Binary);

/// An entity's properties without a struct: a map from name to typed value, with typed accessors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties(pub BTreeMap<String, Value>);

impl Properties {
    /// No properties.
    pub fn new() -> Properties {
        Properties::default()
    }

    /// Sets a property, returning `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Value>) -> Properties {
        self.0.insert(name.into(), value.into());
        self
    }

    /// Sets a property.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<Value>) {
        self.0.insert(name.into(), value.into());
    }

    /// The raw value of a property.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// A string property.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// An Int32 property.
    pub fn get_i32(&self, name: &str) -> Option<i32> {
        match self.0.get(name) {
            Some(Value::Int32(v)) => Some(*v),
            _ => None,
        }
    }

    /// An Int64 property (an Int32 one widens).
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        match self.0.get(name) {
            Some(Value::Int64(v)) => Some(*v),
            Some(Value::Int32(v)) => Some(i64::from(*v)),
            _ => None,
        }
    }

    /// A Double property.
    pub fn get_f64(&self, name: &str) -> Option<f64> {
        match self.0.get(name) {
            Some(Value::Double(v)) => Some(*v),
            _ => None,
        }
    }

    /// A Boolean property.
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.0.get(name) {
            Some(Value::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    /// A DateTime property.
    pub fn get_datetime(&self, name: &str) -> Option<DateTime> {
        match self.0.get(name) {
            Some(Value::DateTime(v)) => Some(*v),
            _ => None,
        }
    }

    /// A Guid property.
    pub fn get_guid(&self, name: &str) -> Option<Uuid> {
        match self.0.get(name) {
            Some(Value::Guid(v)) => Some(*v),
            _ => None,
        }
    }

    /// A document property, or a member or element inside one, by path
    /// ([`Value::at`]): `Address/City`.
    pub fn get_path(&self, path: &str) -> Option<&Value> {
        let (name, rest) = path.split_once('/').unwrap_or((path, ""));
        self.0.get(name)?.at(rest)
    }

    /// A Binary property.
    pub fn get_binary(&self, name: &str) -> Option<&[u8]> {
        match self.0.get(name) {
            Some(Value::Binary(v)) => Some(v),
            _ => None,
        }
    }
}

/// With the `chrono` feature: `chrono::DateTime<Utc>` to and from [`DateTime`] (truncated to
/// 100 ns).
///
/// ```
/// # #[cfg(feature = "chrono")] {
/// use trestle_client::DateTime;
/// let instant = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_700).unwrap();
/// let stored = DateTime::from(instant);
/// assert_eq!(chrono::DateTime::<chrono::Utc>::from(stored), instant);
/// # }
/// ```
#[cfg(feature = "chrono")]
mod chrono_conversions {
    use super::DateTime;

    impl From<chrono::DateTime<chrono::Utc>> for DateTime {
        fn from(time: chrono::DateTime<chrono::Utc>) -> DateTime {
            DateTime::from_unix(time.timestamp(), time.timestamp_subsec_nanos())
        }
    }

    impl From<DateTime> for chrono::DateTime<chrono::Utc> {
        fn from(time: DateTime) -> chrono::DateTime<chrono::Utc> {
            let (seconds, nanos) = time.to_unix();
            chrono::DateTime::from_timestamp(seconds, nanos)
                .expect("an Azure DateTime is within chrono's range")
        }
    }
}

/// With the `time` feature: `time::OffsetDateTime` to and from [`DateTime`] (in UTC, truncated
/// to 100 ns).
#[cfg(feature = "time")]
mod time_conversions {
    use super::DateTime;

    impl From<time::OffsetDateTime> for DateTime {
        fn from(instant: time::OffsetDateTime) -> DateTime {
            DateTime::from_unix(instant.unix_timestamp(), instant.nanosecond())
        }
    }

    impl From<DateTime> for time::OffsetDateTime {
        fn from(instant: DateTime) -> time::OffsetDateTime {
            let (seconds, nanos) = instant.to_unix();
            time::OffsetDateTime::from_unix_timestamp(seconds)
                .expect("an Azure DateTime is within time's range")
                + time::Duration::nanoseconds(i64::from(nanos))
        }
    }
}
