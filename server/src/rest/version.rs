//! The service version a request asks for (`x-ms-version`): one of Azure's, served and answered
//! back, or refused with `InvalidHeaderValue` as Azure refuses a version it does not have.

use super::Request;
use crate::model::{quoted, Ticks};

/// The version the endpoint speaks, and answers a request that names none with.
pub(super) const SERVED: &str = "2019-02-02";

/// Azure Storage's service versions, oldest first, as Microsoft's versioning page lists them.
/// A version later than the last one here (and not after today) is served too: Azure may have
/// published it since.
const AZURE_VERSIONS: &[&str] = &[
    "2009-09-19",
    "2011-08-18",
    "2012-02-12",
    "2013-08-15",
    "2014-02-14",
    "2015-02-21",
    "2015-04-05",
    "2015-07-08",
    "2015-12-11",
    "2016-05-31",
    "2017-04-17",
    "2017-07-29",
    "2017-11-09",
    "2018-03-28",
    "2018-11-09",
    "2019-02-02",
    "2019-07-07",
    "2019-10-10",
    "2019-12-12",
    "2020-02-10",
    "2020-04-08",
    "2020-06-12",
    "2020-08-04",
    "2020-10-02",
    "2020-12-06",
    "2021-02-12",
    "2021-04-10",
    "2021-06-08",
    "2021-08-06",
    "2021-10-04",
    "2021-12-02",
    "2022-11-02",
    "2023-01-03",
    "2023-05-03",
    "2023-08-03",
    "2023-11-03",
    "2024-02-04",
    "2024-05-04",
    "2024-08-04",
    "2024-11-04",
    "2025-01-05",
    "2025-05-05",
    "2025-07-05",
    "2025-11-05",
];

/// The version `request` names, answered back as the version served: `None` when it names none;
/// refused (why) when it is not a date, is no version of Azure's, or is after today.
pub(super) fn requested(request: &Request) -> Result<Option<String>, String> {
    let Some(version) = request.header("x-ms-version") else {
        return Ok(None);
    };
    let today = Ticks::now().to_rfc3339();
    if is_version(version, &today[..10]) {
        Ok(Some(version.to_owned()))
    } else {
        Err(format!(
            "x-ms-version {} is not a version of the service (this endpoint serves {SERVED})",
            quoted(version)
        ))
    }
}

/// Whether `version` is one of Azure's, or a well-formed date past the last one known and not
/// after `today` (`YYYY-MM-DD`).
fn is_version(version: &str, today: &str) -> bool {
    let well_formed = version.len() == 10
        && version.char_indices().all(|(at, c)| match at {
            4 | 7 => c == '-',
            _ => c.is_ascii_digit(),
        });
    let newest = AZURE_VERSIONS.last().copied().unwrap_or(SERVED);
    well_formed && (AZURE_VERSIONS.contains(&version) || (version > newest && version <= today))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_versions_and_later_dates_are_served_and_other_dates_refused() {
        let today = "2026-11-25";
        for served in [
            "2009-09-19",
            "2019-02-02",
            "2020-08-04",
            "2025-11-05",
            "2026-01-01",
        ] {
            assert!(is_version(served, today), "{served}");
        }
        for refused in [
            "2019-02-03",
            "2009-07-17",
            "1999-01-01",
            "2026-11-26",
            "2019-2-02",
            "invalid",
            "",
        ] {
            assert!(!is_version(refused, today), "{refused}");
        }
    }
}
