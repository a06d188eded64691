//! Splits a filter into tokens, each with the byte offset it starts at.

use uuid::Uuid;

use super::FilterError;
use crate::model::{Ticks, Value};

/// A token of the filter language.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    LeftParen,
    RightParen,
    /// A property name (or a keyword, which the parser recognises).
    Word(String),
    /// A literal value.
    Literal(Value),
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Spanned {
    pub(super) token: Token,
    pub(super) offset: usize,
}

/// Tokenizes `text`.
pub(super) fn tokenize(text: &str) -> Result<Vec<Spanned>, FilterError> {
    let mut lexer = Lexer { text, pos: 0 };
    let mut tokens = Vec::new();
    while let Some(token) = lexer.next_token()? {
        tokens.push(token);
    }
    Ok(tokens)
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn next_token(&mut self) -> Result<Option<Spanned>, FilterError> {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += self.peek().map_or(0, char::len_utf8);
        }
        let offset = self.pos;
        let Some(c) = self.peek() else {
            return Ok(None);
        };
        let token = match c {
            '(' => {
                self.pos += 1;
                Token::LeftParen
            }
            ')' => {
                self.pos += 1;
                Token::RightParen
            }
            '\'' => Token::Literal(Value::String(self.quoted()?)),
            '-' | '0'..='9' => Token::Literal(self.number()?),
            c if c == '_' || c.is_alphabetic() => {
                let word = self.word();
                if self.peek() == Some('\'') {
                    Token::Literal(self.typed_literal(&word, offset)?)
                } else if self.text[self.pos..].trim_start().starts_with('(')
                    && !matches!(word.as_str(), "and" | "or" | "not")
                {
                    return Err(FilterError::new(
                        offset,
                        format!("functions such as '{word}' are not supported"),
                    ));
                } else {
                    Token::Word(word)
                }
            }
            other => {
                return Err(FilterError::new(
                    offset,
                    format!("unexpected character {other:?}"),
                ))
            }
        };
        Ok(Some(Spanned { token, offset }))
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| c == '_' || c.is_alphanumeric()) {
            self.pos += self.peek().map_or(0, char::len_utf8);
        }
        self.text[start..self.pos].to_owned()
    }

    /// A `'…'` string with `''` standing for one quote; `pos` is at the opening quote.
    fn quoted(&mut self) -> Result<String, FilterError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(FilterError::new(
                        start,
                        "the string starting here is not closed",
                    ))
                }
                Some('\'') if self.text[self.pos + 1..].starts_with('\'') => {
                    out.push('\'');
                    self.pos += 2;
                }
                Some('\'') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// `42` (Int32), `42L` (Int64), `4.2` / `1e3` / `4.2e-1` (Double), with an optional `-`.
    fn number(&mut self) -> Result<Value, FilterError> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let digits = |pos: &mut usize| {
            let from = *pos;
            while bytes.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos > from
        };
        let mut pos = self.pos + usize::from(bytes[self.pos] == b'-');
        if !digits(&mut pos) {
            return Err(FilterError::new(start, "expected digits after '-'"));
        }
        let mut is_double = false;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            is_double = true;
            if !digits(&mut pos) {
                return Err(FilterError::new(
                    pos,
                    "expected digits after the decimal point",
                ));
            }
        }
        if matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            is_double = true;
            if matches!(bytes.get(pos), Some(b'+' | b'-')) {
                pos += 1;
            }
            if !digits(&mut pos) {
                return Err(FilterError::new(pos, "expected digits in the exponent"));
            }
        }
        let literal = &self.text[start..pos];
        let int64 = !is_double && matches!(bytes.get(pos), Some(b'L'));
        self.pos = pos + usize::from(int64);
        if self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            return Err(FilterError::new(
                self.pos,
                format!("unexpected character after the number '{literal}'"),
            ));
        }
        let value = if is_double {
            literal.parse().map(Value::Double).ok()
        } else if int64 {
            literal.parse().map(Value::Int64).ok()
        } else {
            literal.parse().map(Value::Int32).ok()
        };
        value.ok_or_else(|| {
            let hint = if int64 || is_double {
                ""
            } else {
                "; append L for an Int64"
            };
            let kind = if int64 {
                "Int64"
            } else if is_double {
                "Double"
            } else {
                "Int32"
            };
            FilterError::new(
                start,
                format!("'{literal}' is out of the {kind} range{hint}"),
            )
        })
    }

    /// `datetime'…'`, `guid'…'`, `X'…'` or `binary'…'`; `pos` is at the quote.
    fn typed_literal(&mut self, prefix: &str, offset: usize) -> Result<Value, FilterError> {
        let content = self.quoted()?;
        let bad = |what: &str| {
            FilterError::new(offset, format!("{prefix}'{content}' is not a valid {what}"))
        };
        match prefix {
            "datetime" => parse_datetime(&content)
                .map(Value::DateTime)
                .ok_or_else(|| bad("DateTime (ISO 8601 UTC, e.g. 2024-01-02T03:04:05Z)")),
            "guid" => Uuid::try_parse(&content)
                .ok()
                .filter(|_| content.len() == 36)
                .map(Value::Guid)
                .ok_or_else(|| bad("GUID")),
            "X" | "binary" => parse_hex(&content)
                .map(Value::Binary)
                .ok_or_else(|| bad("hex binary")),
            other => Err(FilterError::new(
                offset,
                format!("unknown literal type '{other}': use datetime, guid, X or binary"),
            )),
        }
    }
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS[.fffffff]Z` (up to 7 fractional digits, UTC).
pub(crate) fn parse_datetime(text: &str) -> Option<Ticks> {
    let body = text.strip_suffix('Z')?;
    let (date, time) = body.split_once('T')?;
    let mut date_parts = date.split('-');
    let year: i64 = fixed_digits(date_parts.next()?, 4)?;
    let month: i64 = fixed_digits(date_parts.next()?, 2)?;
    let day: i64 = fixed_digits(date_parts.next()?, 2)?;
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, fraction)) => (clock, fraction),
        None => (time, ""),
    };
    let mut clock_parts = clock.split(':');
    let hour: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let minute: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let second: i64 = fixed_digits(clock_parts.next()?, 2)?;
    if date_parts.next().is_some() || clock_parts.next().is_some() || fraction.len() > 7 {
        return None;
    }
    let fraction_ticks = if fraction.is_empty() {
        0
    } else {
        fixed_digits(fraction, fraction.len())? * 10_i64.pow(7 - fraction.len() as u32)
    };
    let days_in_month = [
        31,
        28 + i64::from(is_leap(year)),
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
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let ticks = Ticks(seconds * crate::model::TICKS_PER_SECOND + fraction_ticks);
    (Ticks::MIN..=Ticks::MAX).contains(&ticks).then_some(ticks)
}

fn fixed_digits(text: &str, len: usize) -> Option<i64> {
    (text.len() == len && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok())?
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}
