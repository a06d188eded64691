//! Splits a filter into tokens, each with the byte offset it starts at.

use uuid::Uuid;

use super::FilterError;
use crate::model::{quoted, Ticks, Value};

/// A token of the filter language.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    LeftParen,
    RightParen,
    /// Between the steps of a path: `Address/City`.
    Slash,
    /// After a lambda's variable: `any(h: …)`.
    Colon,
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
            '/' => {
                self.pos += 1;
                Token::Slash
            }
            ':' => {
                self.pos += 1;
                Token::Colon
            }
            '\'' => Token::Literal(Value::String(self.quoted()?)),
            '-' | '0'..='9' => Token::Literal(self.number()?),
            c if c == '_' || c.is_alphabetic() => {
                let word = self.word();
                if self.peek() == Some('\'') {
                    Token::Literal(self.typed_literal(&word, offset)?)
                } else if self.text[self.pos..].trim_start().starts_with('(')
                    && !matches!(word.as_str(), "and" | "or" | "not" | "any" | "all")
                {
                    return Err(FilterError::new(
                        offset,
                        format!("functions such as {} are not supported", quoted(&word)),
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
                format!("unexpected character after the number {}", quoted(literal)),
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
                format!("{} is out of the {kind} range{hint}", quoted(literal)),
            )
        })
    }

    /// `datetime'…'`, `guid'…'`, `X'…'` or `binary'…'`; `pos` is at the quote.
    fn typed_literal(&mut self, prefix: &str, offset: usize) -> Result<Value, FilterError> {
        let content = self.quoted()?;
        let bad = |what: &str| {
            FilterError::new(
                offset,
                format!("{prefix}{} is not a valid {what}", quoted(&content)),
            )
        };
        match prefix {
            "datetime" => Ticks::parse_rfc3339(&content)
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
                format!(
                    "unknown literal type {}: use datetime, guid, X or binary",
                    quoted(other)
                ),
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
