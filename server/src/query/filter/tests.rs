//! Lexer, parser and evaluation tests: every literal form, escaping, precedence, malformed input
//! with its offset, and Azure's type semantics for every pair of types.

use uuid::Uuid;

use super::*;
use crate::model::{EntityKey, Properties, StoredEntity, Ticks, Value};

fn compare(property: &str, op: CompareOp, literal: Value) -> Expr {
    let property = match property {
        "PartitionKey" => Property::PartitionKey,
        "RowKey" => Property::RowKey,
        "Timestamp" => Property::Timestamp,
        other => Property::Custom(other.to_owned()),
    };
    Expr::Compare {
        property,
        op,
        literal,
    }
}

fn literal_of(filter: &str) -> Value {
    match Expr::parse(filter).unwrap() {
        Expr::Compare { literal, .. } => literal,
        other => panic!("{other:?}"),
    }
}

fn error_at(filter: &str) -> (usize, String) {
    let error = Expr::parse(filter).expect_err(filter);
    (error.offset, error.message)
}

#[test]
fn every_literal_form_parses() {
    assert_eq!(literal_of("A eq 'text'"), Value::String("text".into()));
    assert_eq!(
        literal_of("A eq 'O''Brien'"),
        Value::String("O'Brien".into())
    );
    assert_eq!(literal_of("A eq ''"), Value::String(String::new()));
    assert_eq!(literal_of("A eq 42"), Value::Int32(42));
    assert_eq!(literal_of("A eq -42"), Value::Int32(-42));
    assert_eq!(literal_of("A eq 2147483647"), Value::Int32(i32::MAX));
    assert_eq!(literal_of("A eq 42L"), Value::Int64(42));
    assert_eq!(
        literal_of("A eq -9223372036854775808L"),
        Value::Int64(i64::MIN)
    );
    assert_eq!(literal_of("A eq 4.25"), Value::Double(4.25));
    assert_eq!(literal_of("A eq -1.5e3"), Value::Double(-1500.0));
    assert_eq!(literal_of("A eq true"), Value::Bool(true));
    assert_eq!(literal_of("A eq false"), Value::Bool(false));
    let (seconds, _) = Ticks(0).to_unix();
    assert_eq!(seconds, 0);
    assert_eq!(
        literal_of("A eq datetime'1970-01-01T00:00:00Z'"),
        Value::DateTime(Ticks(0))
    );
    assert_eq!(
        literal_of("A eq datetime'1970-01-01T00:00:00.1234567Z'"),
        Value::DateTime(Ticks(1_234_567))
    );
    assert_eq!(
        literal_of("A eq datetime'1970-01-01T00:00:01.5Z'"),
        Value::DateTime(Ticks(15_000_000))
    );
    assert_eq!(
        literal_of("A eq datetime'1601-01-01T00:00:00Z'"),
        Value::DateTime(Ticks::MIN)
    );
    let guid = Uuid::parse_str("a455c695-df98-5678-aaaa-81d3367e5a34").unwrap();
    assert_eq!(
        literal_of("A eq guid'a455c695-df98-5678-aaaa-81d3367e5a34'"),
        Value::Guid(guid)
    );
    assert_eq!(literal_of("A eq X'0a1B'"), Value::Binary(vec![0x0a, 0x1b]));
    assert_eq!(
        literal_of("A eq binary'ff00'"),
        Value::Binary(vec![0xff, 0])
    );
    assert_eq!(literal_of("A eq X''"), Value::Binary(vec![]));
}

#[test]
fn identifiers_and_operators() {
    assert_eq!(
        Expr::parse("PartitionKey eq 'a'").unwrap(),
        compare("PartitionKey", CompareOp::Eq, Value::String("a".into()))
    );
    assert_eq!(
        Expr::parse("_x ne 1").unwrap(),
        compare("_x", CompareOp::Ne, Value::Int32(1))
    );
    for (text, op) in [
        ("gt", CompareOp::Gt),
        ("ge", CompareOp::Ge),
        ("lt", CompareOp::Lt),
        ("le", CompareOp::Le),
    ] {
        assert_eq!(
            Expr::parse(&format!("Age {text} 3")).unwrap(),
            compare("Age", op, Value::Int32(3))
        );
    }
    // A constant on the left is mirrored.
    assert_eq!(
        Expr::parse("'x' eq PartitionKey").unwrap(),
        compare("PartitionKey", CompareOp::Eq, Value::String("x".into()))
    );
    assert_eq!(
        Expr::parse("3 lt Age").unwrap(),
        compare("Age", CompareOp::Gt, Value::Int32(3))
    );
    assert_eq!(
        Expr::parse("  ( Age ge 3 )  ").unwrap(),
        compare("Age", CompareOp::Ge, Value::Int32(3))
    );
}

#[test]
fn precedence_is_not_then_comparison_then_and_then_or() {
    let a = || Box::new(compare("A", CompareOp::Eq, Value::Int32(1)));
    let b = || Box::new(compare("B", CompareOp::Eq, Value::Int32(2)));
    let c = || Box::new(compare("C", CompareOp::Eq, Value::Int32(3)));
    assert_eq!(
        Expr::parse("A eq 1 or B eq 2 and C eq 3").unwrap(),
        Expr::Or(a(), Box::new(Expr::And(b(), c())))
    );
    assert_eq!(
        Expr::parse("A eq 1 and B eq 2 or C eq 3").unwrap(),
        Expr::Or(Box::new(Expr::And(a(), b())), c())
    );
    assert_eq!(
        Expr::parse("(A eq 1 or B eq 2) and C eq 3").unwrap(),
        Expr::And(Box::new(Expr::Or(a(), b())), c())
    );
    assert_eq!(
        Expr::parse("not A eq 1 and B eq 2").unwrap(),
        Expr::And(Box::new(Expr::Not(a())), b())
    );
    assert_eq!(
        Expr::parse("not not (A eq 1)").unwrap(),
        Expr::Not(Box::new(Expr::Not(a())))
    );
    assert_eq!(
        Expr::parse("A eq 1 or B eq 2 or C eq 3").unwrap(),
        Expr::Or(Box::new(Expr::Or(a(), b())), c())
    );
}

#[test]
fn malformed_filters_point_at_the_offending_byte() {
    assert_eq!(error_at("Big eq 5454161346626").0, 7);
    assert!(error_at("Big eq 5454161346626").1.contains("append L"));
    assert_eq!(error_at("Big eq 99999999999999999999L").0, 7);
    assert_eq!(error_at("A eq 'open").0, 5);
    assert_eq!(error_at("(A eq 1").0, 0);
    assert_eq!(error_at("A eq 1)").0, 6);
    assert_eq!(error_at("A eq null").0, 5);
    assert!(error_at("A eq null").1.contains("null"));
    assert_eq!(error_at("startswith(Name, 'a')").0, 0);
    assert!(error_at("startswith(Name, 'a')").1.contains("startswith"));
    assert_eq!(error_at("A eq 1 && B eq 2").0, 7);
    assert_eq!(error_at("A eq $1").0, 5);
    assert_eq!(error_at("A eq").0, 4);
    assert_eq!(error_at("A 1").0, 2);
    assert_eq!(error_at("A eq B").0, 0);
    assert_eq!(error_at("1 eq 1").0, 0);
    assert_eq!(error_at("A eq 1 eq 2").0, 7);
    assert_eq!(error_at("A EQ 1").0, 2);
    assert_eq!(error_at("").0, 0);
    assert_eq!(error_at("A eq 1 and").0, 10);
    assert_eq!(error_at("A eq datetime'2024-13-01T00:00:00Z'").0, 5);
    assert_eq!(
        error_at("A eq datetime'2024-01-01T00:00:00.12345678Z'").0,
        5
    );
    assert_eq!(error_at("A eq guid'nope'").0, 5);
    assert_eq!(error_at("A eq X'abc'").0, 5);
    assert_eq!(error_at("A eq time'x'").0, 5);
    assert_eq!(error_at("A eq 1.").0, 7);
    assert_eq!(error_at("A eq 12abc").0, 7);
}

#[test]
fn at_most_15_comparisons() {
    let fifteen = vec!["A eq 1"; 15].join(" or ");
    assert!(Expr::parse(&fifteen).is_ok());
    let sixteen = format!("{fifteen} or A eq 1");
    assert_eq!(error_at(&sixteen).0, fifteen.len() + 4);
}

fn entity(properties: &[(&str, Value)]) -> StoredEntity {
    StoredEntity {
        key: EntityKey::new("pk".into(), "rk".into()).unwrap(),
        properties: properties
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect::<Properties>(),
        timestamp: Ticks(1_000),
    }
}

/// The outcome of `P <op> literal` for each operator, in the order eq ne gt ge lt le.
fn outcomes(property: Value, literal: &str) -> [bool; 6] {
    let e = entity(&[("P", property)]);
    ["eq", "ne", "gt", "ge", "lt", "le"].map(|op| {
        Expr::parse(&format!("P {op} {literal}"))
            .unwrap()
            .matches(&e)
    })
}

const EQUAL: [bool; 6] = [true, false, false, true, false, true];
const LESS: [bool; 6] = [false, true, false, false, true, true];
const GREATER: [bool; 6] = [false, true, true, true, false, false];
/// Azure's answer for a type mismatch: not equal, and "less than".
const MISMATCH: [bool; 6] = [false, true, false, false, true, true];

#[test]
fn same_types_compare_naturally() {
    assert_eq!(outcomes(Value::String("b".into()), "'b'"), EQUAL);
    assert_eq!(
        outcomes(Value::String("B".into()), "'b'"),
        LESS,
        "ordinal, case-sensitive"
    );
    assert_eq!(outcomes(Value::String("ab".into()), "'a'"), GREATER);
    assert_eq!(outcomes(Value::Int32(5), "5"), EQUAL);
    assert_eq!(outcomes(Value::Int32(-5), "5"), LESS);
    assert_eq!(outcomes(Value::Int64(1 << 40), "1099511627776L"), EQUAL);
    assert_eq!(outcomes(Value::Double(2.5), "2.5"), EQUAL);
    assert_eq!(outcomes(Value::Double(2.5), "3.0"), LESS);
    assert_eq!(outcomes(Value::Bool(true), "false"), GREATER);
    assert_eq!(
        outcomes(
            Value::Guid(Uuid::from_u128(1)),
            "guid'00000000-0000-0000-0000-000000000001'"
        ),
        EQUAL
    );
    assert_eq!(
        outcomes(
            Value::Guid(Uuid::from_u128(1)),
            "guid'00000000-0000-0000-0000-000000000002'"
        ),
        LESS
    );
    assert_eq!(outcomes(Value::Binary(vec![1, 2]), "X'0102'"), EQUAL);
    assert_eq!(outcomes(Value::Binary(vec![1, 2]), "X'0103'"), LESS);
    assert_eq!(outcomes(Value::Binary(vec![1, 2, 0]), "X'0102'"), GREATER);
}

#[test]
fn datetimes_compare_at_100ns() {
    let t = Value::DateTime(Ticks(1_234_567));
    assert_eq!(
        outcomes(t.clone(), "datetime'1970-01-01T00:00:00.1234567Z'"),
        EQUAL
    );
    assert_eq!(
        outcomes(t.clone(), "datetime'1970-01-01T00:00:00.1234568Z'"),
        LESS
    );
    assert_eq!(
        outcomes(t, "datetime'1970-01-01T00:00:00.1234566Z'"),
        GREATER
    );
}

#[test]
fn int32_literals_widen_to_int64_and_double_but_never_narrow() {
    assert_eq!(outcomes(Value::Int64(3), "3"), EQUAL);
    assert_eq!(outcomes(Value::Int64(3), "4"), LESS);
    assert_eq!(outcomes(Value::Double(3.0), "3"), EQUAL);
    assert_eq!(outcomes(Value::Double(3.0), "3L"), EQUAL);
    assert_eq!(outcomes(Value::Double(2.5), "3"), LESS);
    assert_eq!(outcomes(Value::Int32(3), "3L"), MISMATCH);
    assert_eq!(outcomes(Value::Int32(3), "3.0"), MISMATCH);
    assert_eq!(outcomes(Value::Int64(3), "3.0"), MISMATCH);
}

#[test]
fn type_mismatches_are_unequal_and_less() {
    let values = [
        Value::String("3".into()),
        Value::Int32(3),
        Value::Int64(3),
        Value::Double(3.0),
        Value::Bool(true),
        Value::DateTime(Ticks(0)),
        Value::Guid(Uuid::from_u128(3)),
        Value::Binary(vec![3]),
    ];
    let literals = [
        ("'3'", 0),
        ("3", 1),
        ("3L", 2),
        ("3.0", 3),
        ("true", 4),
        ("datetime'1970-01-01T00:00:00Z'", 5),
        ("guid'00000000-0000-0000-0000-000000000003'", 6),
        ("X'03'", 7),
    ];
    for (p, property) in values.iter().enumerate() {
        for (literal, l) in literals {
            let widens = matches!((p, l), (2, 1) | (3, 1) | (3, 2));
            let expected = if p == l || widens { EQUAL } else { MISMATCH };
            assert_eq!(
                outcomes(property.clone(), literal),
                expected,
                "{property:?} vs {literal}"
            );
        }
    }
}

#[test]
fn missing_properties_never_match_not_even_ne() {
    let e = entity(&[]);
    for op in ["eq", "ne", "gt", "ge", "lt", "le"] {
        for literal in [
            "''",
            "1",
            "1L",
            "1.0",
            "true",
            "datetime'2020-01-01T00:00:00Z'",
            "guid'00000000-0000-0000-0000-000000000000'",
            "X'00'",
        ] {
            assert!(!Expr::parse(&format!("Missing {op} {literal}"))
                .unwrap()
                .matches(&e));
        }
    }
    assert!(Expr::parse("not Missing eq 1").unwrap().matches(&e));
}

#[test]
fn nan_is_unordered() {
    assert_eq!(
        outcomes(Value::Double(f64::NAN), "1.0"),
        [false, true, false, false, false, false]
    );
}

#[test]
fn system_properties_are_comparable() {
    let e = entity(&[]);
    assert!(Expr::parse("PartitionKey eq 'pk' and RowKey gt 'a'")
        .unwrap()
        .matches(&e));
    assert!(
        Expr::parse("Timestamp eq datetime'1970-01-01T00:00:00.0001Z'")
            .unwrap()
            .matches(&e)
    );
    assert!(!Expr::parse("PartitionKey eq 1").unwrap().matches(&e));
    assert!(Expr::parse("PartitionKey lt 1").unwrap().matches(&e));
}

#[test]
fn nesting_is_bounded_and_refused_at_the_offending_byte() {
    let deep = |levels: usize| format!("{}A eq 1{}", "(".repeat(levels), ")".repeat(levels));
    assert!(Expr::parse(&deep(MAX_NESTING)).is_ok());
    let (offset, message) = error_at(&deep(MAX_NESTING + 1));
    assert_eq!(offset, MAX_NESTING);
    assert!(message.contains("nest"), "{message}");
    let nots = format!("{}A eq 1", "not ".repeat(MAX_NESTING));
    assert!(Expr::parse(&nots).is_ok());
    let too_many_nots = format!("{}A eq 1", "not ".repeat(MAX_NESTING + 1));
    assert_eq!(error_at(&too_many_nots).0, 4 * MAX_NESTING);
    // Far past the stack: refused, not overflowed.
    assert!(Expr::parse(&"(".repeat(1_000_000)).is_err());
    assert!(Expr::parse(&"not ".repeat(1_000_000)).is_err());
}

#[test]
fn true_and_false_stand_alone_and_read_in_any_case() {
    assert_eq!(Expr::parse("true").unwrap(), Expr::Constant(true));
    assert_eq!(Expr::parse(" False ").unwrap(), Expr::Constant(false));
    assert_eq!(literal_of("A eq TRUE"), Value::Bool(true));
    assert_eq!(literal_of("A eq faLSE"), Value::Bool(false));
    let ada = entity(&[("A", Value::Int32(1))]);
    let matches = |filter: &str| Expr::parse(filter).unwrap().matches(&ada);
    assert!(matches("true"));
    assert!(!matches("false"));
    assert!(matches("not false and A eq 1"));
    assert!(!matches("false and A eq 1"));
    assert!(matches("(true and A eq 1) or false"));
    assert!(matches("true or A eq 2"));
    // A boolean that is compared stays a literal of its comparison.
    assert!(!matches("A eq true"));
    assert_eq!(error_at("true eq false").0, 0);
    assert_eq!(error_at("true A eq 1").0, 5);
    let sixteen = vec!["true"; 16].join(" and ");
    assert!(error_at(&sixteen).1.contains("at most 15"));
}

fn document_entity() -> StoredEntity {
    use crate::model::Document;
    let holding = |symbol: &str, held: i64| {
        let members = [
            ("Symbol".to_owned(), Value::String(symbol.into())),
            ("NumberHeld".to_owned(), Value::Int64(held)),
        ];
        Value::Document(Document::object(members).unwrap())
    };
    let holdings = Document::array([holding("zaza", 60), holding("abc", 10)]).unwrap();
    let books = Document::array([Value::String("b1".into()), Value::String("b2".into())]);
    let address = Document::object([("City".to_owned(), Value::String("Seattle".into()))]);
    let empty = Document::array([]).unwrap();
    entity(&[
        ("Holdings", Value::Document(holdings)),
        ("Books", Value::Document(books.unwrap())),
        ("Address", Value::Document(address.unwrap())),
        ("Empty", Value::Document(empty)),
        ("Limit", Value::Int64(50)),
    ])
}

fn matches(filter: &str) -> bool {
    Expr::parse(filter)
        .unwrap_or_else(|e| panic!("{filter}: {e:?}"))
        .matches(&document_entity())
}

#[test]
fn positions_in_paths_read_one_element_of_an_array() {
    assert!(matches("Holdings/0/Symbol eq 'zaza'"));
    assert!(matches("Holdings/1/NumberHeld eq 10L"));
    assert!(!matches("Holdings/1/Symbol eq 'zaza'"));
    assert!(matches("Books/1 eq 'b2'"));
    assert!(
        !matches("Books/2 eq 'b3'") && !matches("Books/2 ne 'b3'"),
        "past the end is a missing property"
    );
    assert!(
        !matches("Address/0 eq 'Seattle'"),
        "in an object, a position is a member name"
    );
    assert!(matches(
        "Holdings/any(h: h/NumberHeld gt 50L) and Books/0 eq 'b1'"
    ));
    assert!(matches("Books/00 eq 'b1'"), "written as patches read it");
}

#[test]
fn paths_and_lambdas_read_documents() {
    assert!(matches("Address/City eq 'Seattle'"));
    assert!(!matches("Address/City ne 'Seattle'"));
    assert!(
        !matches("Address/Zip eq 'x'"),
        "a missing member is a missing property"
    );
    assert!(!matches("Address/Zip ne 'x'"), "ne too");
    assert!(
        !matches("Address/City/Deeper eq 'x'"),
        "a step through a scalar"
    );
    assert!(!matches("Address eq 'Seattle'"), "a document is no scalar");
    assert!(
        matches("Address ne 'Seattle'"),
        "a type mismatch is unequal"
    );
    assert!(matches(
        "Holdings/any(h: h/Symbol eq 'zaza' and h/NumberHeld gt 50)"
    ));
    assert!(!matches(
        "Holdings/any(h: h/Symbol eq 'abc' and h/NumberHeld gt 50)"
    ));
    assert!(matches("Holdings/all(h: h/NumberHeld ge 10)"));
    assert!(!matches("Holdings/all(h: h/NumberHeld gt 10)"));
    assert!(matches(
        "Holdings/any(h: h/NumberHeld gt 50L and Limit eq 50L)"
    ));
    assert!(matches("Books/any(b: b eq 'b1')"));
    assert!(!matches("Books/any(b: b eq 'b3')"));
    assert!(matches("Books/any()"));
    assert!(!matches("Empty/any()"));
    assert!(matches("Empty/all(x: x eq 1)"), "all of nothing holds");
    assert!(!matches("Missing/any()"));
    assert!(!matches("Missing/all(x: x eq 1)"), "not an array: false");
    assert!(!matches("Address/all(x: x eq 1)"), "an object is no array");
    assert!(matches("not Missing/any()"));
    // A lambda without a body looks at one element at most, inside another lambda too.
    assert!(matches(
        "Holdings/any(h: h/Symbol eq 'zaza' and Books/any())"
    ));
}

#[test]
fn lambdas_that_rescan_an_array_per_element_are_refused_before_they_run() {
    // Each costs up to 10,000 × 10,000 steps on one entity: refused whatever the entity holds.
    for filter in [
        "A/any(x: A/any(y: A/any(z: z eq -1)))",
        "A/any(x: A/any(y: y eq 1))",
        "Books/any(b: Holdings/any(h: h/Symbol eq 'zaza' and b eq 'b2'))",
        "A/all(x: B/all(y: y eq 1))",
        "A/any(x: x/B/any(y: x/C/any(z: z eq 1)))",
    ] {
        let (offset, message) = error_at(filter);
        assert_eq!(offset, 0, "{filter}");
        assert!(message.contains("too complex"), "{filter}: {message}");
        assert!(
            message.contains(&crate::model::DEFAULT_WORK_BUDGET.to_string()),
            "{message}"
        );
    }
    // Lambdas over their enclosing lambda's variable visit disjoint parts of one array: fine at
    // any depth, with every comparison a filter may hold.
    let deep = format!(
        "A/any(v: {}v eq 1{})",
        "v/any(v: ".repeat(13),
        ")".repeat(13)
    );
    let many = ["A/any(x: x/B/any(y: y eq 1 or y eq 2))"; 3].join(" or ");
    let widest = vec!["x eq 1"; MAX_COMPARISONS - 1].join(" or ");
    for filter in [deep, many, format!("A/any(x: {widest})")] {
        assert!(
            Expr::parse(&filter).is_ok(),
            "{filter}: {:?}",
            Expr::parse(&filter)
        );
    }
}

#[test]
fn malformed_paths_and_lambdas_point_at_the_offending_byte() {
    assert_eq!(
        error_at("any(x: x eq 1)"),
        (
            0,
            "'any' applies to an array: write Tags/any(t: t eq 'x')".into()
        )
    );
    assert_eq!(
        error_at("PartitionKey/x eq 'a'"),
        (0, "'PartitionKey' has no members".into())
    );
    assert_eq!(
        error_at("Address/ eq 'a'").1,
        "expected a member name or an array position after '/'"
    );
    assert_eq!(
        error_at("Variants/-1/Stock gt 0"),
        (
            9,
            "a position in an array counts from 0 at its start; negative positions are not taken"
                .into()
        )
    );
    assert_eq!(
        error_at("Variants/1.5 gt 0").1,
        "expected a member name or an array position after '/'"
    );
    assert_eq!(
        error_at("Tags/all()").1,
        "expected a variable, as in all(x: x eq 1)"
    );
    assert_eq!(
        error_at("Tags/any(t t eq 1)").1,
        "expected ':' after the variable"
    );
    assert_eq!(error_at("Tags/any(t: t eq 1").0, 8);
    assert_eq!(
        error_at("A eq Tags/any()").1,
        "'any' and 'all' are conditions, not values to compare"
    );
    assert_eq!(
        error_at("Tags/any() eq true").1,
        "expected 'and', 'or' or the end of the filter"
    );
    assert_eq!(
        error_at("Tags/any(and: and eq 1)").1,
        "expected a variable, as in any(x: x eq 1)"
    );
}

#[test]
fn lambdas_count_against_the_bounds() {
    let nested = format!(
        "{}t eq 1{}",
        "T/any(t: ".repeat(MAX_NESTING + 1),
        ")".repeat(MAX_NESTING + 1)
    );
    assert!(error_at(&nested).1.contains("at most 64 deep"));
    let many = vec!["T/any()"; MAX_COMPARISONS + 1].join(" or ");
    assert!(error_at(&many).1.contains("at most 15 comparisons"));
    let within = ["T/any(t: t eq 1)"; 7].join(" or ");
    assert!(
        Expr::parse(&within).is_ok(),
        "each lambda and comparison counts once"
    );
}
