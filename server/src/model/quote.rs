//! Client input as error messages show it: whole when short, otherwise a prefix and its length.
//! Every error that quotes what a client sent goes through [`quoted`], so no error echoes
//! unbounded input (a 4 MiB filter would otherwise come back as a 4 MiB `grpc-message`, which
//! clients built on grpc-core drop together with the status and the reason).

use std::fmt;

/// Most characters of one input an error message quotes.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `text` in single quotes, cut to [`MAX_QUOTED_CHARS`] characters with its length in bytes when
/// longer.
pub fn quoted(text: &str) -> Quoted<'_> {
    Quoted(text)
}

/// Displays client input in bounded form; see [`quoted`].
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        match text.char_indices().nth(MAX_QUOTED_CHARS) {
            None => write!(f, "'{text}'"),
            Some((cut, _)) => write!(f, "'{}…' ({} bytes)", &text[..cut], text.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_quoted_whole_and_long_input_as_a_prefix_with_its_length() {
        assert_eq!(quoted("O'Brien").to_string(), "'O'Brien'");
        let long = "é".repeat(1_000_000);
        let shown = quoted(&long).to_string();
        assert!(shown.len() < 200, "{shown}");
        assert!(shown.ends_with("…' (2000000 bytes)"), "{shown}");
    }
}
