//! The client's deadline, from the `grpc-timeout` request header (gRPC over HTTP/2: up to eight
//! digits and a unit, `H M S m u n`), so that long scans stop when the caller stops waiting.

use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;

const HEADER: &str = "grpc-timeout";

/// When the caller stops waiting, if it said; a malformed header is ignored (as tonic does).
pub(crate) fn from_metadata(metadata: &MetadataMap, received: Instant) -> Option<Instant> {
    let text = metadata.get(HEADER)?.to_str().ok()?;
    received.checked_add(parse(text)?)
}

fn parse(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(amount * 3600),
        'M' => Duration::from_secs(amount * 60),
        'S' => Duration::from_secs(amount),
        'm' => Duration::from_millis(amount),
        'u' => Duration::from_micros(amount),
        'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_refuses_junk() {
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("150m"), Some(Duration::from_millis(150)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("5M"), Some(Duration::from_secs(300)));
        assert_eq!(parse("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse("9n"), Some(Duration::from_nanos(9)));
        for junk in ["", "S", "123456789S", "1x", "-1S", "1.5S", "ä"] {
            assert_eq!(parse(junk), None, "{junk}");
        }
    }
}
