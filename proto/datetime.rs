//! Azure's DateTime text form, shared by the server (ETags, filter literals) and the SDK (filter
//! literals): ISO 8601 UTC with up to seven fractional digits, as 100 ns ticks since the Unix epoch.

/// Ticks (100 ns units) in one second.
pub const TICKS_PER_SECOND: i64 = 10_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Formats ticks as Azure prints them: `2013-08-22T01:12:06.2608595Z`.
pub fn format(ticks: i64) -> String {
    let mut out = String::with_capacity(28);
    format_into(ticks, ":", &mut out);
    out
}

/// Appends ticks to `out` as [`format()`] prints them, with `time_separator` between hours, minutes
/// and seconds (ETags percent-encode it as `%3A`). Written digit by digit: ETags are formatted
/// for every entity a query returns, and `format!` would cost more than the rest of the entity.
pub fn format_into(ticks: i64, time_separator: &str, out: &mut String) {
    let seconds = ticks.div_euclid(TICKS_PER_SECOND);
    let fraction = ticks.rem_euclid(TICKS_PER_SECOND);
    let (year, month, day) = civil_from_days(seconds.div_euclid(SECONDS_PER_DAY));
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    if (0..=9999).contains(&year) {
        push_digits(out, year, 4);
    } else {
        out.push_str(&std::format!("{year:04}"));
    }
    out.push('-');
    push_digits(out, month, 2);
    out.push('-');
    push_digits(out, day, 2);
    out.push('T');
    push_digits(out, second_of_day / 3600, 2);
    out.push_str(time_separator);
    push_digits(out, second_of_day / 60 % 60, 2);
    out.push_str(time_separator);
    push_digits(out, second_of_day % 60, 2);
    out.push('.');
    push_digits(out, fraction, 7);
    out.push('Z');
}

/// Appends the `width` (at most 7) lowest decimal digits of a non-negative `value`, zero-padded.
fn push_digits(out: &mut String, mut value: i64, width: usize) {
    let mut digits = [b'0'; 7];
    for slot in digits[..width].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
    // Pushed one by one: checking the digits as UTF-8 cost more than formatting them.
    out.extend(digits[..width].iter().map(|&digit| char::from(digit)));
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fffffff]Z` (up to 7 fractional digits, UTC) into ticks.
pub fn parse(text: &str) -> Option<i64> {
    let body = text.strip_suffix('Z')?;
    let (date, time) = body.split_once('T')?;
    let mut date_parts = date.split('-');
    let year = fixed_digits(date_parts.next()?, 4)?;
    let month = fixed_digits(date_parts.next()?, 2)?;
    let day = fixed_digits(date_parts.next()?, 2)?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.split(':');
    let hour = fixed_digits(clock_parts.next()?, 2)?;
    let minute = fixed_digits(clock_parts.next()?, 2)?;
    let second = fixed_digits(clock_parts.next()?, 2)?;
    if date_parts.next().is_some() || clock_parts.next().is_some() || fraction.len() > 7 {
        return None;
    }
    let fraction_ticks = match fraction.len() {
        0 => 0,
        len => fixed_digits(fraction, len)? * 10_i64.pow(7 - len as u32),
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = [
        31,
        28 + i64::from(leap),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month[(month - 1).clamp(0, 11) as usize]).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let seconds =
        days_from_civil(year, month, day) * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
    Some(seconds * TICKS_PER_SECOND + fraction_ticks)
}

fn fixed_digits(text: &str, len: usize) -> Option<i64> {
    (text.len() == len && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok())?
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    era * 146_097 + year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        for ticks in [
            0,
            1,
            -1,
            -116_444_736_000_000_000,
            2_534_023_007_999_999_999,
            17_000_000_001_234_567,
        ] {
            assert_eq!(parse(&format(ticks)), Some(ticks), "{}", format(ticks));
        }
        assert_eq!(format(0), "1970-01-01T00:00:00.0000000Z");
        let mut tagged = String::new();
        format_into(17_000_000_001_234_567, "%3A", &mut tagged);
        assert_eq!(tagged, format(17_000_000_001_234_567).replace(':', "%3A"));
    }

    #[test]
    fn digit_by_digit_formatting_agrees_with_format_macro() {
        let reference = |ticks: i64| {
            let seconds = ticks.div_euclid(TICKS_PER_SECOND);
            let fraction = ticks.rem_euclid(TICKS_PER_SECOND);
            let (year, month, day) = civil_from_days(seconds.div_euclid(SECONDS_PER_DAY));
            let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
            std::format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:07}Z",
                second_of_day / 3600,
                second_of_day / 60 % 60,
                second_of_day % 60
            )
        };
        let mut ticks = -700_000_000_000_000_000_i64;
        while ticks < 700_000_000_000_000_000 {
            assert_eq!(format(ticks), reference(ticks));
            ticks += 9_876_543_210_987_653;
        }
        assert_eq!(
            parse("2024-02-29T12:00:00Z"),
            parse("2024-02-29T12:00:00.0000000Z")
        );
        assert_eq!(parse("2023-02-29T12:00:00Z"), None);
        assert_eq!(parse("2024-01-01T00:00:00.12345678Z"), None);
        assert_eq!(parse("2024-01-01 00:00:00Z"), None);
    }
}
