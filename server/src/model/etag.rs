//! ETags and `If-Match` preconditions.

use super::{Ticks, ValidationError};

/// An opaque version tag. Trestle derives it from the entity's timestamp, as Azure does:
/// `W/"datetime'2024-01-02T03%3A04%3A05.1234567Z'"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(String);

impl ETag {
    /// The ETag of an entity written at `timestamp`.
    pub fn for_timestamp(timestamp: Ticks) -> ETag {
        let mut tag = String::with_capacity(48);
        Self::write_for_timestamp(timestamp, &mut tag);
        ETag(tag)
    }

    /// Appends the ETag of an entity written at `timestamp` to `out`, without allocating.
    pub fn write_for_timestamp(timestamp: Ticks, out: &mut String) {
        out.push_str("W/\"datetime'");
        trestle_proto::datetime::format_into(timestamp.0, "%3A", out);
        out.push_str("'\"");
    }

    /// The tag as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tag as sent on the wire, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// The ETag of the entity last shown, kept as text: formatted again only when the timestamp
/// changes (the entities one commit wrote share theirs, and a scan reads them side by side).
#[derive(Debug, Default)]
pub struct ETagText {
    text: String,
    timestamp: Option<Ticks>,
}

impl ETagText {
    /// The ETag of an entity written at `timestamp`.
    pub fn for_timestamp(&mut self, timestamp: Ticks) -> &str {
        if self.timestamp != Some(timestamp) {
            self.text.clear();
            ETag::write_for_timestamp(timestamp, &mut self.text);
            self.timestamp = Some(timestamp);
        }
        &self.text
    }
}

/// The precondition of an update, merge or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// `*`: any existing version.
    Any,
    /// Exactly this version.
    Tag(ETag),
}

impl IfMatch {
    /// Parses a required `if_match`: `*` or a well-formed weak ETag (`W/"…"`).
    pub fn parse(value: &str) -> Result<IfMatch, ValidationError> {
        match value {
            "" => Err(ValidationError::IfMatchMissing),
            "*" => Ok(IfMatch::Any),
            tag if is_weak_etag(tag) => Ok(IfMatch::Tag(ETag(tag.to_owned()))),
            other => Err(ValidationError::ETagInvalid {
                value: other.to_owned(),
            }),
        }
    }

    /// Whether an entity with `current` satisfies the precondition.
    pub fn matches(&self, current: &ETag) -> bool {
        match self {
            IfMatch::Any => true,
            IfMatch::Tag(tag) => tag == current,
        }
    }
}

fn is_weak_etag(value: &str) -> bool {
    value
        .strip_prefix("W/\"")
        .and_then(|rest| rest.strip_suffix('"'))
        .is_some_and(|inner| !inner.is_empty() && !inner.contains('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_derives_from_the_timestamp() {
        let tag = ETag::for_timestamp(Ticks(0));
        assert_eq!(
            tag.as_str(),
            "W/\"datetime'1970-01-01T00%3A00%3A00.0000000Z'\""
        );
        assert_eq!(IfMatch::parse(tag.as_str()), Ok(IfMatch::Tag(tag)));
    }

    #[test]
    fn etag_text_follows_the_timestamp_it_is_asked_for() {
        let mut text = ETagText::default();
        for ticks in [5, 5, 6, 5, i64::MAX, 0, 0] {
            let expected = ETag::for_timestamp(Ticks(ticks));
            assert_eq!(text.for_timestamp(Ticks(ticks)), expected.as_str());
        }
    }

    #[test]
    fn if_match_refuses_malformed_tags() {
        assert_eq!(IfMatch::parse(""), Err(ValidationError::IfMatchMissing));
        assert_eq!(IfMatch::parse("*"), Ok(IfMatch::Any));
        // The weak indicator is case-sensitive (RFC 7232): `w/"…"` is refused, not read as `W/`.
        let lower = format!("w{}", &ETag::for_timestamp(Ticks(7)).as_str()[1..]);
        for bad in [
            "x",
            "\"x\"",
            "W/x",
            "W/\"\"",
            "datetime'2020'",
            lower.as_str(),
        ] {
            assert!(
                matches!(
                    IfMatch::parse(bad),
                    Err(ValidationError::ETagInvalid { .. })
                ),
                "{bad}"
            );
        }
    }
}
