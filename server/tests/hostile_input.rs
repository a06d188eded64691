//! Every parser that sees client (or disk) bytes, fed arbitrary and mutated input: the filter
//! parser and evaluator, continuation and table-listing tokens, access tokens and key files, and
//! the stored-entity codec (truncated and bit-flipped valid records: `storage::codec`'s tests). Each must answer with an error, never panic. The same targets run
//! coverage-guided under cargo-fuzz (`server/fuzz`); crashes found there become cases here.

use std::time::SystemTime;

use proptest::prelude::*;
use trestle_proto::access::{self, Grant, KeyRing, Permissions};
use trestle_server::model::{Document, EntityKey, Properties, StoredEntity, Ticks, Value};
use trestle_server::query::{ContinuationToken, Expr, TablesToken, TokenSeal};
use trestle_server::storage::EntityView;

/// Pieces of the filter grammar, so that random sequences reach deep into the parser.
const FILTER_TOKENS: &[&str] = &[
    "PartitionKey",
    "RowKey",
    "Timestamp",
    "Name",
    "Age",
    "eq",
    "ne",
    "gt",
    "ge",
    "lt",
    "le",
    "and",
    "or",
    "not",
    "(",
    ")",
    "'x'",
    "''",
    "'it''s'",
    "12",
    "-3",
    "12L",
    "2.5",
    "1e308",
    "true",
    "false",
    "datetime'2024-01-01T00:00:00Z'",
    "guid'a455c695-df98-5678-aaaa-81d3367e5a34'",
    "X'00ff'",
    "binary'0a'",
    "'",
    "datetime'",
    "guid'zz'",
    "9999999999999999999",
    "NaN",
    " ",
    "/",
    ":",
    "Address/City",
    "Tags/any(t: t eq 'x')",
    "Tags/all(",
    "Tags/any()",
    "any(",
    "h/Symbol",
    "h:",
    "Holdings/any(h:",
];

/// The nesting-heavy part of the dictionary (also `server/fuzz/filter.dict`): units that open a
/// level, repeated thousands of times, find what bounded grammar soup cannot, a recursion that
/// runs off the end of the stack.
const NESTING_UNITS: &[&str] = &[
    "(",
    "not ",
    "(not ",
    "not (",
    "((((",
    "not not not not ",
    "Tags/any(t: ",
    "Holdings/all(h: h/Lots/any(l: ",
];

fn sample_entity() -> StoredEntity {
    StoredEntity {
        key: EntityKey::new("p".into(), "r".into()).unwrap(),
        properties: Properties::from([
            ("Name".to_owned(), Value::String("Ada".into())),
            ("Age".to_owned(), Value::Int32(36)),
            ("Score".to_owned(), Value::Double(f64::NAN)),
            ("Address".to_owned(), address()),
            ("Tags".to_owned(), tags()),
        ]),
        timestamp: Ticks(0),
    }
}

fn address() -> Value {
    let city = [("City".to_owned(), Value::String("Seattle".into()))];
    Value::Document(Document::object(city).unwrap())
}

fn tags() -> Value {
    let tags = [Value::String("x".into()), Value::Null, address()];
    Value::Document(Document::array(tags).unwrap())
}

fn check_filter(text: &str) {
    if let Ok(expr) = Expr::parse(text) {
        let _ = expr.matches(&sample_entity());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_filter_parser_never_panics_on_any_text(text in "\\PC{0,120}") {
        check_filter(&text);
    }

    #[test]
    fn the_filter_parser_never_panics_on_grammar_soup(
        tokens in prop::collection::vec(prop::sample::select(FILTER_TOKENS), 0..40)
    ) {
        check_filter(&tokens.join(" "));
        check_filter(&tokens.concat());
    }

    #[test]
    fn continuation_tokens_never_panic(text in "[A-Za-z0-9_=+/-]{0,80}", bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let seal = TokenSeal::new(b"store secret");
        let _ = ContinuationToken::decode(&text, &seal, 1, 2);
        let encoded = base64_url(&bytes);
        prop_assert!(ContinuationToken::decode(&encoded, &seal, 1, 2).is_err());
        let _ = TablesToken::decode(&text, &seal);
        prop_assert!(TablesToken::decode(&encoded, &seal).is_err());
    }

    #[test]
    fn access_tokens_never_panic_and_mutations_never_verify(
        text in "\\PC{0,200}",
        claims in prop::collection::vec(any::<u8>(), 0..120),
        signature in prop::collection::vec(any::<u8>(), 0..40),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let keys = keys();
        let now = SystemTime::now();
        let _ = access::verify(keys, &text, now);
        let forged = format!("tt1.{}.{}", base64_url(&claims), base64_url(&signature));
        prop_assert!(access::verify(keys, &forged, now).is_err());

        let valid = access::mint(keys.signing_key(), &Grant::new(Permissions::READ, 60));
        let mut bytes = valid.clone().into_bytes();
        let at = flip.index(bytes.len());
        bytes[at] ^= 1 << bit;
        if let Ok(mutated) = String::from_utf8(bytes) {
            if mutated != valid {
                let verified = access::verify(keys, &mutated, now);
                // Flipping a base64 character's unused low bits can decode to the same bytes.
                prop_assert!(verified.is_err() || verified == access::verify(keys, &valid, now));
            }
        }
        let _ = KeyRing::parse(&text);
    }

    #[test]
    fn the_entity_codec_never_panics_on_corrupt_records(
        value in prop::collection::vec(any::<u8>(), 0..200),
        keep_name in "[A-Za-z]{0,4}",
    ) {
        if let Ok(entity) = EntityView::parse("p", "r", &value) {
            entity.properties().for_each(drop);
            let _ = entity.property(&keep_name);
            let select = [keep_name];
            entity.selecting(&select).properties().for_each(drop);
        }
    }
}

proptest! {
    // Each case is a long text; fewer cases keep the suite fast.
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn the_filter_parser_never_overflows_on_deep_nesting(
        unit in prop::sample::select(NESTING_UNITS),
        levels in 0usize..20_000,
        core in prop::collection::vec(prop::sample::select(FILTER_TOKENS), 0..8),
        close in any::<bool>(),
    ) {
        let mut text = unit.repeat(levels);
        text.push_str(&core.join(" "));
        if close {
            text.push_str(&")".repeat(levels));
        }
        check_filter(&text);
    }
}

fn keys() -> &'static KeyRing {
    static KEYS: std::sync::OnceLock<KeyRing> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| KeyRing::generate().unwrap())
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
