//! Azure's REST behaviour where the SDKs' requests or Azure's own test suite meet it, over raw
//! HTTP: a trailing slash names the same resource, full metadata writes types, ids and edit links
//! as Azure does (minimal metadata no system property's type), one table is read by name, a
//! shared access signature giving a field twice is refused, the filter and ETag leniencies Azure
//! has (or not), `$top=0`, `$format`, Atom, `$select=*`, a byte order mark, a `+` in the query, a
//! body naming other keys than its URL, CORS rules, preflights and their answers; and Trestle's
//! own `$orderby` and `$apply`.

mod common;

use common::rest::{assert_refused, exchange, exchange_with, server};
use tokio::net::TcpStream;

const FULL: &str = "Accept: application/json;odata=fullmetadata\r\n";

/// Creates table `table` and inserts each of `entities` (JSON bodies).
async fn create_with_entities(socket: &mut TcpStream, table: &str, entities: &[String]) {
    let body = format!(r#"{{"TableName":"{table}"}}"#);
    let (status, answer) =
        exchange(socket, "POST", "/devstoreaccount1/Tables", body.as_bytes()).await;
    assert_eq!(status, 201, "{answer}");
    let path = format!("/devstoreaccount1/{table}");
    for entity in entities {
        let (status, answer) = exchange(socket, "POST", &path, entity.as_bytes()).await;
        assert_eq!(status, 201, "{entity}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_slash_names_the_same_resource() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables/",
        br#"{"TableName":"Slashed"}"#,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Slashed/",
        br#"{"PartitionKey":"p","RowKey":"r"}"#,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = exchange(&mut socket, "GET", "/devstoreaccount1/Tables/", b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""TableName":"Slashed""#), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_metadata_names_types_ids_and_edit_links_as_azure_does() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, answer) = exchange_with(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables",
        FULL,
        br#"{"TableName":"Meta"}"#,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert!(
        answer.contains(r#""odata.type":"devstoreaccount1.Tables""#)
            && answer.contains(r#""odata.id":"http://localhost/devstoreaccount1/Tables('Meta')""#)
            && answer.contains(r#""odata.editLink":"Tables('Meta')""#),
        "{answer}"
    );
    let (_, listed) =
        exchange_with(&mut socket, "GET", "/devstoreaccount1/Tables", FULL, b"").await;
    assert!(
        listed.contains(r#""odata.editLink":"Tables('Meta')""#),
        "{listed}"
    );
    // One table by name (ignoring case), as Query Tables answers it; a missing one is not found.
    let (status, one) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables('meta')",
        FULL,
        b"",
    )
    .await;
    assert_eq!(status, 200, "{one}");
    assert!(
        one.contains(
            r#""odata.metadata":"http://localhost/devstoreaccount1/$metadata#Tables/@Element""#
        ) && one.contains(r#""odata.editLink":"Tables('Meta')""#)
            && one.contains(r#""TableName":"Meta""#),
        "{one}"
    );
    let none = exchange(&mut socket, "GET", "/devstoreaccount1/Tables('Nope')", b"").await;
    assert_refused(&none, 404, "TableNotFound");

    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Meta",
        br#"{"PartitionKey":"p","RowKey":"it's"}"#,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let path = "/devstoreaccount1/Meta(PartitionKey='p',RowKey='it''s')";
    let (status, answer) = exchange_with(&mut socket, "GET", path, FULL, b"").await;
    assert_eq!(status, 200, "{answer}");
    let link = "Meta(PartitionKey='p',RowKey='it''s')";
    assert!(
        answer.contains(r#""odata.type":"devstoreaccount1.Meta""#)
            && answer.contains(&format!(
                r#""odata.id":"http://localhost/devstoreaccount1/{link}""#
            ))
            && answer.contains(&format!(r#""odata.editLink":"{link}""#))
            && answer.contains(r#""Timestamp@odata.type":"Edm.DateTime""#),
        "{answer}"
    );
    // Minimal metadata annotates no system property, as Azure's does not.
    let minimal = "Accept: application/json;odata=minimalmetadata\r\n";
    let (status, answer) = exchange_with(&mut socket, "GET", path, minimal, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains(r#""odata.etag""#) && !answer.contains("Timestamp@odata.type"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_access_signature_giving_a_field_twice_is_refused() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let path = "/devstoreaccount1/Tables?sv=2019-02-02&ss=t&srt=sco&sp=rl\
                &se=2099-01-01T00%3A00%3A00Z&sig=c2ln&sig=b3RoZXI%3D";
    let answer = exchange(&mut socket, "GET", path, b"").await;
    assert_refused(&answer, 403, "AuthenticationFailed");
    assert!(
        answer.1.contains("field sig more than once"),
        "{}",
        answer.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_service_version_is_refused_and_a_known_one_answered_back() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    for refused in [
        "invalid",
        "1999-01-01",
        "2999-01-01",
        "2019-2-02",
        "2019-02-03",
    ] {
        let header = format!("x-ms-version: {refused}\r\n");
        let answer =
            exchange_with(&mut socket, "GET", "/devstoreaccount1/Tables", &header, b"").await;
        assert_refused(&answer, 400, "InvalidHeaderValue");
    }
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        "x-ms-version: 2020-08-04\r\n",
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("x-ms-version: 2020-08-04\r\n"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_true_or_false_filters_everything_or_nothing_and_booleans_read_in_any_case() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let flags = [("a", true), ("b", false)]
        .map(|(row, flag)| format!(r#"{{"PartitionKey":"p","RowKey":"{row}","Flag":{flag}}}"#));
    create_with_entities(&mut socket, "Lenient", &flags).await;
    let rows = |answer: &str| {
        ["\"RowKey\":\"a\"", "\"RowKey\":\"b\""]
            .iter()
            .filter(|row| answer.contains(*row))
            .count()
    };
    for (filter, expected) in [
        ("true", 2),
        ("false", 0),
        ("not%20false", 2),
        ("Flag%20eq%20True", 1),
        ("Flag%20eq%20FALSE%20or%20false", 1),
    ] {
        let path = format!("/devstoreaccount1/Lenient()?$filter={filter}");
        let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
        assert_eq!(status, 200, "{filter}: {answer}");
        assert_eq!(rows(&answer), expected, "{filter}: {answer}");
    }
    // The weak indicator is case-sensitive (RFC 7232): a lower-case `w/` is no ETag.
    let (_, got) = exchange(
        &mut socket,
        "GET",
        "/devstoreaccount1/Lenient(PartitionKey='p',RowKey='a')",
        b"",
    )
    .await;
    let etag = got
        .lines()
        .find_map(|line| line.strip_prefix("ETag: ").or(line.strip_prefix("etag: ")))
        .expect("an ETag header")
        .to_owned();
    let lower = format!("If-Match: w{}\r\n", &etag[1..]);
    let answer = exchange_with(
        &mut socket,
        "DELETE",
        "/devstoreaccount1/Lenient(PartitionKey='p',RowKey='a')",
        &lower,
        b"",
    )
    .await;
    assert_refused(&answer, 400, "InvalidInput");
    let exact = format!("If-Match: {etag}\r\n");
    let (status, answer) = exchange_with(
        &mut socket,
        "DELETE",
        "/devstoreaccount1/Lenient(PartitionKey='p',RowKey='a')",
        &exact,
        b"",
    )
    .await;
    assert_eq!(status, 204, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_zero_answers_no_entities_or_tables_after_the_checks_any_query_has() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let rows = ["a", "b"].map(|row| format!(r#"{{"PartitionKey":"p","RowKey":"{row}"}}"#));
    create_with_entities(&mut socket, "Topped", &rows).await;
    // Each query, whether its page holds row `a` (else nothing at all), and whether it continues.
    for (path, holds_a, continues) in [
        ("/devstoreaccount1/Topped()?$top=0", false, false),
        ("/devstoreaccount1/Topped()?$top=1", true, true),
        ("/devstoreaccount1/Tables?$top=0", false, false),
    ] {
        let (status, answer) = exchange(&mut socket, "GET", path, b"").await;
        assert_eq!(status, 200, "{path}: {answer}");
        let page_is_empty = answer.ends_with(r#"{"value":[]}"#);
        assert_eq!(page_is_empty, !holds_a, "{path}: {answer}");
        assert_eq!(
            answer.contains(r#""RowKey":"a""#),
            holds_a,
            "{path}: {answer}"
        );
        assert_eq!(
            answer.contains("x-ms-continuation-"),
            continues,
            "{path}: {answer}"
        );
    }

    // What any query is refused for, a query of none is refused for too.
    for (path, code, reason) in [
        ("/devstoreaccount1/Missing()?$top=0", 404, "TableNotFound"),
        (
            "/devstoreaccount1/Topped()?$top=0&$filter=RowKey%20eq",
            400,
            "InvalidInput",
        ),
        ("/devstoreaccount1/Topped()?$top=-1", 400, "InvalidInput"),
    ] {
        assert_refused(&exchange(&mut socket, "GET", path, b"").await, code, reason);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plus_in_the_query_is_a_plus_as_azure_reads_it() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let rows = ["a b", "a+b"].map(|row| format!(r#"{{"PartitionKey":"p","RowKey":"{row}"}}"#));
    create_with_entities(&mut socket, "Plus", &rows).await;
    // Azure does not read `+` as a space (its Go SDK sends spaces as `%20` for that reason).
    for (filter, found) in [
        ("RowKey%20eq%20'a+b'", Some("a+b")),
        ("RowKey%20eq%20'a%2Bb'", Some("a+b")),
        ("RowKey%20eq%20'a%20b'", Some("a b")),
        ("RowKey+eq+'a+b'", None),
    ] {
        let path = format!("/devstoreaccount1/Plus()?$filter={filter}");
        let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
        match found {
            Some(row) => {
                assert_eq!(status, 200, "{filter}: {answer}");
                let only = format!(r#"{{"value":[{{"PartitionKey":"p","RowKey":"{row}","#);
                assert!(answer.contains(&only), "{filter}: {answer}");
                assert_eq!(answer.matches("RowKey").count(), 1, "{filter}: {answer}");
            }
            None => assert_eq!(status, 400, "{filter}: {answer}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_naming_other_keys_than_the_url_is_refused_and_writes_nothing() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    create_with_entities(&mut socket, "Keyed", &[]).await;
    let url = "/devstoreaccount1/Keyed(PartitionKey='p',RowKey='q')";
    for (method, body) in [
        ("PUT", r#"{"PartitionKey":"x","RowKey":"q","A":1}"#),
        ("MERGE", r#"{"RowKey":"y","A":1}"#),
        ("PATCH", r#"{"PartitionKey":"p","RowKey":"y","A":1}"#),
    ] {
        let answer = exchange(&mut socket, method, url, body.as_bytes()).await;
        assert_refused(&answer, 400, "InvalidInput");
        assert!(
            answer.1.contains("is not the URL's"),
            "{method} {body}: {}",
            answer.1
        );
    }
    for read in [url, "/devstoreaccount1/Keyed(PartitionKey='x',RowKey='q')"] {
        let (status, answer) = exchange(&mut socket, "GET", read, b"").await;
        assert_eq!(status, 404, "{read}: {answer}");
    }
    // The same keys, or none, in the body: written where the URL says.
    for body in [r#"{"PartitionKey":"p","RowKey":"q","A":1}"#, r#"{"A":2}"#] {
        let (status, answer) = exchange(&mut socket, "PUT", url, body.as_bytes()).await;
        assert_eq!(status, 204, "{body}: {answer}");
    }
    let (status, answer) = exchange(&mut socket, "GET", url, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""A":2"#), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_in_the_query_atom_a_star_select_and_a_byte_order_mark_are_read_as_azure_does() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    // A body may begin with UTF-8's byte order mark, as Windows PowerShell writes it.
    let bom = |json: &str| [&b"\xEF\xBB\xBF"[..], json.as_bytes()].concat();
    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables",
        &bom(r#"{"TableName":"Formats"}"#),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let entity = bom(r#"{"PartitionKey":"p","RowKey":"r","A":1,"B":"b"}"#);
    let (status, answer) =
        exchange(&mut socket, "POST", "/devstoreaccount1/Formats", &entity).await;
    assert_eq!(status, 201, "{answer}");

    // `$format` overrides `Accept` (here nometadata), for a point read and a query alike.
    let full = "$format=application%2Fjson%3Bodata%3Dfullmetadata";
    for path in [
        format!("/devstoreaccount1/Formats(PartitionKey='p',RowKey='r')?{full}"),
        format!("/devstoreaccount1/Formats()?{full}"),
    ] {
        let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
        assert_eq!(status, 200, "{path}: {answer}");
        assert!(
            answer.contains(r#""odata.type":"devstoreaccount1.Formats""#)
                && answer.contains("odata=fullmetadata"),
            "{path}: {answer}"
        );
    }
    // Atom answers, which Azure stopped serving in 2015, are refused unless JSON is accepted too.
    let path = "/devstoreaccount1/Formats()";
    for (accept, status_wanted) in [
        ("Accept: application/atom+xml\r\n", 415),
        ("Accept: application/atom+xml,application/json\r\n", 200),
    ] {
        let (status, answer) = exchange_with(&mut socket, "GET", path, accept, b"").await;
        assert_eq!(status, status_wanted, "{accept}: {answer}");
        if status == 415 {
            assert!(
                answer.contains("x-ms-error-code: AtomFormatNotSupported"),
                "{answer}"
            );
        }
    }
    // `$select=*` selects every property, as no `$select` does.
    let (status, answer) = exchange(
        &mut socket,
        "GET",
        "/devstoreaccount1/Formats()?$select=*",
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""A":1,"B":"b""#), "{answer}");
    // Otherwise a `$select` shows what it names only, the system properties included, as Azure.
    for (select, shown) in [
        ("A", r#"{"A":1}"#),
        ("RowKey,B", r#"{"RowKey":"r","B":"b"}"#),
        ("PartitionKey", r#"{"PartitionKey":"p"}"#),
    ] {
        let path = format!("/devstoreaccount1/Formats()?$select={select}");
        let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains(shown), "{select}: {answer}");
        let path =
            format!("/devstoreaccount1/Formats(PartitionKey='p',RowKey='r')?$select={select}");
        let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.ends_with(shown), "{select}: {answer}");
    }
}

/// Set Service Properties with `rules` (`<CorsRule>` elements) as the body.
fn properties_body(rules: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>\
         <Cors>{rules}</Cors></StorageServiceProperties>"
    )
}

const APP_RULE: &str = "<CorsRule><AllowedOrigins>http://app.example</AllowedOrigins>\
    <AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-*,accept</AllowedHeaders>\
    <ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>600</MaxAgeInSeconds></CorsRule>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_rules_answer_preflights_and_mark_the_answers_a_page_may_read() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let preflight = |origin: &str, method: &str, headers: &str| {
        format!(
            "Origin: {origin}\r\nAccess-Control-Request-Method: {method}\r\n\
             Access-Control-Request-Headers: {headers}\r\n"
        )
    };
    let asked = preflight("http://app.example", "GET", "x-ms-version,Accept");
    let answer = exchange_with(
        &mut socket,
        "OPTIONS",
        "/devstoreaccount1/Tables",
        &asked,
        b"",
    )
    .await;
    assert_refused(&answer, 403, "CorsPreflightFailure");

    let service = "/devstoreaccount1/?restype=service&comp=properties";
    let body = properties_body(APP_RULE);
    let (status, answer) = exchange(&mut socket, "PUT", service, body.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");
    let (status, answer) = exchange_with(
        &mut socket,
        "OPTIONS",
        "/devstoreaccount1/Tables",
        &asked,
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    for header in [
        "access-control-allow-origin: http://app.example\r\n",
        "access-control-allow-methods: GET\r\n",
        "access-control-allow-headers: x-ms-version,Accept\r\n",
        "access-control-max-age: 600\r\n",
        "vary: Origin\r\n",
    ] {
        assert!(
            answer.to_lowercase().contains(&header.to_lowercase()),
            "{header}: {answer}"
        );
    }
    for refused in [
        preflight("http://evil.example", "GET", "x-ms-version"),
        preflight("http://app.example", "DELETE", "x-ms-version"),
        preflight("http://app.example", "GET", "x-ms-version,authorization"),
    ] {
        let (status, answer) = exchange_with(
            &mut socket,
            "OPTIONS",
            "/devstoreaccount1/Tables",
            &refused,
            b"",
        )
        .await;
        assert_eq!(status, 403, "{refused}: {answer}");
        // Azure's text, which clients' tests match.
        assert!(
            answer.contains("CORS not enabled or no matching rule found for this request."),
            "{answer}"
        );
    }
    let answer = exchange_with(
        &mut socket,
        "OPTIONS",
        "/devstoreaccount1/Tables",
        "Origin: http://app.example\r\n",
        b"",
    )
    .await;
    assert_refused(&answer, 400, "InvalidHeaderValue");
    assert!(
        answer.1.contains("A required CORS header is not present."),
        "{answer:?}"
    );

    // The answer to a page's request says the page may read it, and which headers.
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        "Origin: http://app.example\r\n",
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let lower = answer.to_lowercase();
    assert!(
        lower.contains("access-control-allow-origin: http://app.example\r\n"),
        "{answer}"
    );
    let exposed = lower
        .lines()
        .find_map(|line| line.strip_prefix("access-control-expose-headers: "))
        .expect("exposed headers");
    assert!(
        exposed.contains("x-ms-request-id") && !exposed.contains("content-type"),
        "{answer}"
    );
    assert!(lower.contains("keep-alive: timeout="), "{answer}");
    let (_, other) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        "Origin: http://evil.example\r\n",
        b"",
    )
    .await;
    assert!(
        !other.to_lowercase().contains("access-control-allow-origin"),
        "{other}"
    );
    // Rules exist and none matches: the answer varies by origin all the same.
    assert!(other.to_lowercase().contains("vary: origin\r\n"), "{other}");

    // A rule for any origin answers `*` the same to every origin: no `Vary`.
    let any = APP_RULE.replace("http://app.example", "*");
    let body = properties_body(&any);
    let (status, answer) = exchange(&mut socket, "PUT", service, body.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");
    let (_, starred) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        "Origin: http://any.example\r\n",
        b"",
    )
    .await;
    let lower = starred.to_lowercase();
    assert!(
        lower.contains("access-control-allow-origin: *\r\n") && !lower.contains("vary:"),
        "{starred}"
    );
    let body = properties_body(APP_RULE);
    let (status, answer) = exchange(&mut socket, "PUT", service, body.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");

    // Read back as set; bad settings are refused and change nothing.
    let (_, kept) = exchange(&mut socket, "GET", service, b"").await;
    assert!(
        kept.contains("<AllowedOrigins>http://app.example</AllowedOrigins>"),
        "{kept}"
    );
    assert!(
        kept.contains("<MaxAgeInSeconds>600</MaxAgeInSeconds>"),
        "{kept}"
    );
    let six = properties_body(&APP_RULE.repeat(6));
    let fetch = properties_body(&APP_RULE.replace("GET,PUT", "FETCH"));
    for (bad, code) in [
        (
            "<StorageServiceProperties><Cors>".to_owned(),
            "InvalidXmlDocument",
        ),
        ("<Other/>".to_owned(), "InvalidXmlDocument"),
        (
            properties_body(&APP_RULE.replace(">600<", ">soon<")),
            "InvalidXmlDocument",
        ),
        (six, "InvalidInput"),
        (fetch, "InvalidInput"),
    ] {
        let answer = exchange(&mut socket, "PUT", service, bad.as_bytes()).await;
        assert_refused(&answer, 400, code);
    }
    let (_, still) = exchange(&mut socket, "GET", service, b"").await;
    assert_eq!(
        still.split("\r\n\r\n").nth(1),
        kept.split("\r\n\r\n").nth(1),
        "a refusal changes nothing"
    );
}

/// Statistics are the secondary location's, as Azure serves them: asked of the primary they are
/// refused 400, as the emulator does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_are_served_on_the_secondary_location_only() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let stats = "?restype=service&comp=stats";
    let (status, answer) = exchange(
        &mut socket,
        "GET",
        &format!("/devstoreaccount1-secondary/{stats}"),
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("<Status>live</Status>"), "{answer}");
    let answer = exchange(
        &mut socket,
        "GET",
        &format!("/devstoreaccount1/{stats}"),
        b"",
    )
    .await;
    assert_refused(&answer, 400, "InvalidUri");
    assert!(answer.1.contains("secondary location"), "{answer:?}");
}

/// A null property, annotated with a type or not, is ignored: the entity lacks it (the data
/// model has no null property value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_property_typed_or_not_is_left_out() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let table = br#"{"TableName":"Nulls"}"#;
    let (status, answer) = exchange(&mut socket, "POST", "/devstoreaccount1/Tables", table).await;
    assert_eq!(status, 201, "{answer}");
    let entity = br#"{"PartitionKey":"p","RowKey":"r","A":1,"U":null,"V":null,"V@odata.type":"Edm.DateTime"}"#;
    let (status, answer) = exchange(&mut socket, "POST", "/devstoreaccount1/Nulls", entity).await;
    assert_eq!(status, 201, "{answer}");
    let path = "/devstoreaccount1/Nulls(PartitionKey='p',RowKey='r')";
    let (status, answer) = exchange(&mut socket, "GET", path, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""A":1"#), "{answer}");
    assert!(
        !answer.contains(r#""U""#) && !answer.contains(r#""V"#),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderby_sorts_a_query_and_pages_follow_it() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let entities: Vec<String> = [(1, 30), (2, 10), (3, 20), (4, 10)]
        .iter()
        .map(|(n, age)| format!(r#"{{"PartitionKey":"p","RowKey":"r{n}","Age":{age}}}"#))
        .collect();
    create_with_entities(&mut socket, "Ordered", &entities).await;
    let row_keys = |answer: &str| -> Vec<String> {
        let keys = page_keys(answer).into_iter();
        keys.map(|(_, row_key)| row_key).collect()
    };
    let path = "/devstoreaccount1/Ordered()?$orderby=Age%20desc,RowKey";
    let (status, answer) = exchange(&mut socket, "GET", path, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(row_keys(&answer), ["r1", "r3", "r2", "r4"]);
    // Two at a time, following the continuation.
    let first = "/devstoreaccount1/Ordered()?$orderby=Age&$top=2";
    let (status, answer) = exchange(&mut socket, "GET", first, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(row_keys(&answer), ["r2", "r4"]);
    let token = next_partition_key(&answer).expect("a continuation");
    let next = format!("{first}&NextPartitionKey={token}&NextRowKey=next");
    let (status, answer) = exchange(&mut socket, "GET", &next, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(row_keys(&answer), ["r3", "r1"]);
    for bad in ["Age%20down", "", "A,B,C,D,E"] {
        let path = format!("/devstoreaccount1/Ordered()?$orderby={bad}");
        let answer = exchange(&mut socket, "GET", &path, b"").await;
        assert_refused(&answer, 400, "InvalidInput");
    }
}

/// The (PartitionKey, RowKey) of each entity of a query's answer, in order.
fn page_keys(answer: &str) -> Vec<(String, String)> {
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let body = &body[body.find('{').unwrap()..];
    let json: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    let entities = json["value"].as_array().unwrap().iter();
    entities
        .map(|e| {
            let key = |name: &str| e[name].as_str().unwrap().to_owned();
            (key("PartitionKey"), key("RowKey"))
        })
        .collect()
}

/// The continuation a query's answer carries in `x-ms-continuation-NextPartitionKey`.
fn next_partition_key(answer: &str) -> Option<String> {
    answer.lines().find_map(|line| {
        line.to_ascii_lowercase()
            .strip_prefix("x-ms-continuation-nextpartitionkey: ")
            .map(|_| line.split_once(": ").unwrap().1.to_owned())
    })
}

/// Scan segments over REST (Trestle's own custom query options `segment` and `totalSegments`,
/// as gRPC's): the segments of one total are disjoint, whole partitions each, each in key order
/// and paged by its own continuation, together the table; `$apply` counts a segment; bad
/// numbers are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_split_a_query_into_disjoint_parts_of_whole_partitions() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let entities: Vec<String> = (0..40)
        .map(|n| format!(r#"{{"PartitionKey":"p{:02}","RowKey":"r{n:02}"}}"#, n % 13))
        .collect();
    create_with_entities(&mut socket, "Split", &entities).await;
    let mut everything = Vec::new();
    for segment in 0..3 {
        let first = format!("/devstoreaccount1/Split()?segment={segment}&totalSegments=3&$top=4");
        let mut path = first.clone();
        let mut read = Vec::new();
        loop {
            let (status, answer) = exchange(&mut socket, "GET", &path, b"").await;
            assert_eq!(status, 200, "{answer}");
            read.extend(page_keys(&answer));
            let Some(token) = next_partition_key(&answer) else {
                break;
            };
            path = format!("{first}&NextPartitionKey={token}&NextRowKey=next");
        }
        assert!(
            read.windows(2).all(|w| w[0] < w[1]),
            "in key order: {read:?}"
        );
        let count = format!(
            "/devstoreaccount1/Split()?segment={segment}&totalSegments=3&$apply=aggregate($count%20as%20N)"
        );
        let (status, answer) = exchange(&mut socket, "GET", &count, b"").await;
        assert_eq!(status, 200, "{answer}");
        assert!(
            answer.contains(&format!(r#""N":"{}""#, read.len())),
            "{answer}"
        );
        everything.push(read);
    }
    let partitions = |keys: &[(String, String)]| -> std::collections::BTreeSet<String> {
        keys.iter().map(|(pk, _)| pk.clone()).collect()
    };
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let (a, b) = (partitions(&everything[a]), partitions(&everything[b]));
        assert!(a.is_disjoint(&b), "no partition in two segments");
    }
    let mut all: Vec<(String, String)> = everything.concat();
    all.sort();
    let expected: Vec<(String, String)> = (0..40)
        .map(|n| (format!("p{:02}", n % 13), format!("r{n:02}")))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(all, expected, "the segments together are the table");
    for (bad, says) in [
        ("segment=3&totalSegments=3", "numbered 0 to 2"),
        ("segment=0&totalSegments=2000", "at most 1024"),
        ("segment=x&totalSegments=2", "is not a number"),
        ("segment=1", "needs total_segments"),
    ] {
        let path = format!("/devstoreaccount1/Split()?{bad}");
        let answer = exchange(&mut socket, "GET", &path, b"").await;
        assert_refused(&answer, 400, "InvalidInput");
        assert!(answer.1.contains(says), "{bad}: {answer:?}");
    }
}

/// `$apply` (OData's aggregation extension, Trestle's own over REST): the aggregate of a query's
/// matches as `AggregateEntities` computes it, each row's columns by their names and types; a
/// bare `groupby` lists the distinct values; what it does not take is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_aggregates_a_query_and_refuses_what_it_does_not_take() {
    let (_server, rest) = server(|_| {}).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let entities: Vec<String> = [("east", 10), ("west", 5), ("east", 7), ("north", 1)]
        .iter()
        .enumerate()
        .map(|(n, (region, amount))| {
            format!(
                r#"{{"PartitionKey":"p","RowKey":"r{n}","Region":"{region}","Amount":{amount},"Amount@odata.type":"Edm.Int64"}}"#
            )
        })
        .collect();
    create_with_entities(&mut socket, "Sales", &entities).await;
    let rows = |answer: &str| -> serde_json::Value {
        let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
        let body = &body[body.find('{').unwrap()..];
        let json: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
        json["value"].clone()
    };
    let by_region = "/devstoreaccount1/Sales()?$apply=groupby((Region),aggregate(Amount%20with%20sum%20as%20Total,$count%20as%20Orders))&$filter=Amount%20gt%201L";
    let (status, answer) = exchange(&mut socket, "GET", by_region, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        rows(&answer),
        serde_json::json!([
            {"Region": "east", "Total": "17", "Orders": "2"},
            {"Region": "west", "Total": "5", "Orders": "1"},
        ])
    );
    assert!(answer.contains("x-trestle-examined: 4"), "{answer}");
    let whole = "/devstoreaccount1/Sales()?$apply=aggregate(Amount%20with%20average%20as%20Mean,Amount%20with%20max%20as%20Most)";
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        whole,
        "Accept: application/json;odata=minimalmetadata\r\n",
        b"",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        rows(&answer),
        serde_json::json!([{"Mean@odata.type": "Edm.Double", "Mean": 5.75,
            "Most@odata.type": "Edm.Int64", "Most": "10"}])
    );
    let distinct = "/devstoreaccount1/Sales()?$apply=groupby((Region))";
    let (status, answer) = exchange(&mut socket, "GET", distinct, b"").await;
    assert_eq!(status, 200, "{answer}");
    let regions = serde_json::json!([{"Region": "east"}, {"Region": "north"}, {"Region": "west"}]);
    assert_eq!(rows(&answer), regions);
    for (bad, says) in [
        ("filter(Amount%20gt%201)", "$apply takes aggregate"),
        (
            "aggregate(Amount%20with%20countdistinct%20as%20N)",
            "countdistinct",
        ),
        (
            "aggregate(Amount%20with%20sum%20as%20N)&$top=1",
            "$top is not taken",
        ),
        ("groupby((A,B,C,D,E))", "group"),
    ] {
        let path = format!("/devstoreaccount1/Sales()?$apply={bad}");
        let answer = exchange(&mut socket, "GET", &path, b"").await;
        assert_refused(&answer, 400, "InvalidInput");
        assert!(answer.1.contains(says), "{bad}: {}", answer.1);
    }
}
