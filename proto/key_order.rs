//! Key order, as both sides need it: keys compare by their UTF-8 bytes (code point order), so
//! "every key starting with a prefix" is the range from the prefix to [`prefix_end`].

/// The smallest string greater than every string that starts with `prefix` ("simulating
/// StartsWith": `RowKey ge prefix and RowKey lt prefix_end(prefix)`): the prefix with its last
/// character incremented, dropping trailing characters that cannot be. `None` when no such string
/// exists (the prefix is empty or made only of `char::MAX`).
///
/// ```
/// assert_eq!(trestle_proto::key_order::prefix_end("exp"), Some("exq".to_owned()));
/// ```
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}
