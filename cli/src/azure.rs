//! An Azure Table endpoint as a source of entities: Azure itself, Azurite or another Trestle's
//! REST endpoint, named by an Azure Storage connection string. Requests are signed with the
//! account key (SharedKeyLite) or carry the string's shared access signature; entities come page
//! by page, each property with its EDM type read from Azure's JSON (`Name@odata.type`).

use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::hmac;
use serde_json::{Map, Value as Json};
use trestle_client::{EntityKey, Properties, Value};

use crate::values::{entity_key, leaf};
use crate::CliError;

/// The REST API version the requests speak (the one the current Azure SDKs send).
const API_VERSION: &str = "2019-02-02";
/// Entities asked for in one page: Azure's most.
const PAGE_SIZE: &str = "1000";
/// The development storage account (Azurite's), which `UseDevelopmentStorage=true` names.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const DEV_ENDPOINT: &str = "http://127.0.0.1:10002/devstoreaccount1";

/// How requests prove who sends them.
enum Credential {
    /// SharedKeyLite with the account's key.
    Key(hmac::Key),
    /// A shared access signature: query parameters added to every request.
    Signature(String),
    /// Nothing (a public or open endpoint).
    Anonymous,
}

/// An Azure Table service: its endpoint, account and credential.
pub(crate) struct AzureTables {
    http: reqwest::Client,
    /// The table service's URL, without a trailing slash (`https://acct.table.core.windows.net`
    /// or, path-style, `http://127.0.0.1:10002/devstoreaccount1`).
    endpoint: String,
    account: String,
    credential: Credential,
}

impl std::fmt::Debug for AzureTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureTables")
            .field("endpoint", &self.endpoint)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl AzureTables {
    /// The service an Azure Storage connection string names (`AccountName`, `AccountKey` or
    /// `SharedAccessSignature`, `TableEndpoint` or `DefaultEndpointsProtocol` and
    /// `EndpointSuffix`, or `UseDevelopmentStorage=true`).
    pub(crate) fn from_connection_string(text: &str) -> Result<AzureTables, CliError> {
        let usage = |why: &str| CliError::Usage(format!("the connection string: {why}"));
        let mut fields = std::collections::HashMap::new();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| usage("write Name=value pairs separated by ';'"))?;
            fields.insert(name.to_ascii_lowercase(), value.to_owned());
        }
        let field = |name: &str| fields.get(name).cloned();
        let development = field("usedevelopmentstorage").is_some_and(|v| v == "true");
        let account = field("accountname")
            .or_else(|| development.then(|| DEV_ACCOUNT.to_owned()))
            .ok_or_else(|| usage("AccountName is missing"))?;
        let key = field("accountkey").or_else(|| development.then(|| DEV_KEY.to_owned()));
        let credential = match (key, field("sharedaccesssignature")) {
            (Some(key), _) => Credential::Key(hmac::Key::new(
                hmac::HMAC_SHA256,
                &STANDARD
                    .decode(key.trim())
                    .map_err(|_| usage("AccountKey is not base64"))?,
            )),
            (None, Some(signature)) => {
                Credential::Signature(signature.trim_start_matches('?').to_owned())
            }
            (None, None) => Credential::Anonymous,
        };
        let endpoint = match field("tableendpoint") {
            Some(endpoint) => endpoint,
            None if development => DEV_ENDPOINT.to_owned(),
            None => {
                let protocol = field("defaultendpointsprotocol").unwrap_or("https".into());
                let suffix = field("endpointsuffix").unwrap_or("core.windows.net".into());
                format!("{protocol}://{account}.table.{suffix}")
            }
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(usage("the table endpoint is not an http(s) URL"));
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| CliError::Source(format!("an HTTP client: {e}")))?;
        Ok(AzureTables {
            http,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            account,
            credential,
        })
    }

    /// The first page of `table`'s entities that `filter` matches.
    pub(crate) fn entities(&self, table: &str, filter: Option<String>) -> Pages<'_> {
        Pages {
            service: self,
            table: table.to_owned(),
            filter,
            next: Some(None),
        }
    }

    /// GETs `path` (below the endpoint) with `query`: the answer's body and its continuation.
    async fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(Json, Option<(String, String)>), CliError> {
        // Named in messages without its query, which may hold a signature.
        let shown = format!("{}/{path}", self.endpoint);
        let mut url = shown.clone();
        let mut separator = '?';
        let signature = match &self.credential {
            Credential::Signature(signature) => url_pairs(signature),
            _ => Vec::new(),
        };
        let signature = signature.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        for (name, value) in query.iter().copied().chain(signature) {
            url = format!("{url}{separator}{}={}", percent(name), percent(value));
            separator = '&';
        }
        let mut request = self
            .http
            .get(&url)
            .header("Accept", "application/json;odata=minimalmetadata")
            .header("x-ms-version", API_VERSION)
            .header("DataServiceVersion", "3.0");
        match &self.credential {
            Credential::Key(key) => {
                let date = httpdate::fmt_http_date(SystemTime::now());
                // SharedKeyLite: the date and the account-qualified path (path-style endpoints
                // name the account twice, as Azure's emulator expects).
                let resource_path = reqwest::Url::parse(&url)
                    .map_err(|e| CliError::Usage(format!("{shown}: {e}")))?
                    .path()
                    .to_owned();
                let to_sign = format!("{date}\n/{}{resource_path}", self.account);
                let signature = STANDARD.encode(hmac::sign(key, to_sign.as_bytes()));
                request = request.header("x-ms-date", date).header(
                    "Authorization",
                    format!("SharedKeyLite {}:{signature}", self.account),
                );
            }
            Credential::Signature(_) | Credential::Anonymous => {}
        }
        let answer = request
            .send()
            .await
            .map_err(|e| CliError::Source(format!("{shown}: {e}")))?;
        let status = answer.status();
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let continuation = header("x-ms-continuation-NextPartitionKey").map(|pk| {
            (
                pk,
                header("x-ms-continuation-NextRowKey").unwrap_or_default(),
            )
        });
        let body = answer
            .bytes()
            .await
            .map_err(|e| CliError::Source(format!("{shown}: {e}")))?;
        let json: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
        if !status.is_success() {
            let error = &json["odata.error"];
            let code = error["code"].as_str().unwrap_or("no error code");
            let message = error["message"]["value"].as_str().unwrap_or("");
            return Err(CliError::Source(format!(
                "{shown} answered {status} {code}: {message}"
            )));
        }
        if json.is_null() {
            return Err(CliError::Source(format!("{shown} answered no JSON")));
        }
        Ok((json, continuation))
    }
}

/// The pages of a table's entities, read one at a time.
#[derive(Debug)]
pub(crate) struct Pages<'a> {
    service: &'a AzureTables,
    table: String,
    filter: Option<String>,
    /// Where the next page starts: `Some(None)` at the start, `None` after the last page.
    next: Option<Option<(String, String)>>,
}

impl Pages<'_> {
    /// The next page's entities, or `None` after the last.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<(EntityKey, Properties)>>, CliError> {
        let Some(from) = self.next.take() else {
            return Ok(None);
        };
        let mut query = vec![("$top", PAGE_SIZE)];
        if let Some(filter) = &self.filter {
            query.push(("$filter", filter));
        }
        if let Some((partition_key, row_key)) = &from {
            query.push(("NextPartitionKey", partition_key));
            query.push(("NextRowKey", row_key));
        }
        let path = format!("{}()", self.table);
        let (body, continuation) = self.service.get(&path, &query).await?;
        self.next = continuation.map(Some);
        let entities = body["value"]
            .as_array()
            .ok_or_else(|| CliError::Source(format!("{path}: the answer has no \"value\" list")))?
            .iter()
            .map(|entity| {
                entity
                    .as_object()
                    .ok_or_else(|| "an entity is not a JSON object".to_owned())
                    .and_then(entity_of)
                    .map_err(|why| CliError::Source(format!("{path}: {why}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(entities))
    }
}

/// The keys and typed properties of an entity in Azure's JSON (its Timestamp and ETag, which
/// the destination sets anew, are left out).
fn entity_of(json: &Map<String, Json>) -> Result<(EntityKey, Properties), String> {
    let key = entity_key(json).map_err(|why| format!("an entity with {why}"))?;
    let mut properties = Properties::new();
    for (name, value) in json {
        let system = matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp");
        if system || name.contains('@') || name.starts_with("odata.") || value.is_null() {
            continue;
        }
        let annotation = json
            .get(&format!("{name}@odata.type"))
            .and_then(Json::as_str);
        let value = value_of(annotation, value).map_err(|why| {
            format!(
                "{} {}: property {name}: {why}",
                key.partition_key, key.row_key
            )
        })?;
        properties.set(name.clone(), value);
    }
    Ok((key, properties))
}

/// A property's value from its JSON and its `@odata.type` annotation, if any; without one, the
/// type JSON shows (a string, a Boolean, an Int32 for a whole number, a Double otherwise).
fn value_of(annotation: Option<&str>, json: &Json) -> Result<Value, String> {
    if let Some(annotation) = annotation {
        let kind = annotation
            .strip_prefix("Edm.")
            .ok_or_else(|| format!("unknown type {annotation:?}"))?;
        return leaf(kind, json);
    }
    match json {
        Json::String(s) => Ok(Value::String(s.clone())),
        Json::Bool(b) => Ok(Value::Bool(*b)),
        Json::Number(n) => Ok(match n.as_i64().map(i32::try_from) {
            Some(Ok(v)) if !n.is_f64() => Value::Int32(v),
            _ => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        }),
        other => Err(format!("{other} is not a value Azure Tables holds")),
    }
}

/// `text` percent-encoded for a query string: every byte but letters, digits and `-_.~` (a
/// space as `%20`: Azure reads a `+` as a plus).
fn percent(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The `name=value` pairs of a query string, decoded.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://signature/?{query}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_names_the_endpoint_account_and_credential() {
        let azure = AzureTables::from_connection_string(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AAAA;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_eq!(azure.endpoint, "https://acct.table.core.windows.net");
        assert!(matches!(azure.credential, Credential::Key(_)));
        let dev = AzureTables::from_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.endpoint, DEV_ENDPOINT);
        assert_eq!(dev.account, DEV_ACCOUNT);
        let sas = AzureTables::from_connection_string(
            "TableEndpoint=http://127.0.0.1:1/acct/;AccountName=acct;SharedAccessSignature=?sv=1&sig=a%2Bb",
        )
        .unwrap();
        assert_eq!(sas.endpoint, "http://127.0.0.1:1/acct");
        let Credential::Signature(signature) = &sas.credential else {
            panic!("a signature");
        };
        assert_eq!(
            url_pairs(signature),
            [("sv".into(), "1".into()), ("sig".into(), "a+b".into())]
        );
        for bad in [
            "AccountName",
            "AccountKey=AAAA",
            "AccountName=a;AccountKey=not base64!",
            "AccountName=a;TableEndpoint=ftp://x",
        ] {
            let error = AzureTables::from_connection_string(bad).unwrap_err();
            assert!(matches!(error, CliError::Usage(_)), "{bad}: {error}");
        }
    }

    #[test]
    fn values_take_their_annotated_or_shown_type() {
        use serde_json::json;
        let cases = [
            (None, json!("text"), Value::String("text".into())),
            (None, json!(true), Value::Bool(true)),
            (None, json!(42), Value::Int32(42)),
            (None, json!(1.0), Value::Double(1.0)),
            (
                None,
                json!(4_294_967_296_i64),
                Value::Double(4_294_967_296.0),
            ),
            (
                Some("Edm.Int64"),
                json!("9007199254740993"),
                Value::Int64(9_007_199_254_740_993),
            ),
            (Some("Edm.Double"), json!(2), Value::Double(2.0)),
            (
                Some("Edm.Double"),
                json!("Infinity"),
                Value::Double(f64::INFINITY),
            ),
            (
                Some("Edm.Binary"),
                json!("AAH+/w=="),
                Value::Binary(vec![0, 1, 254, 255]),
            ),
        ];
        for (annotation, json, expected) in cases {
            assert_eq!(value_of(annotation, &json).unwrap(), expected, "{json}");
        }
        assert!(value_of(Some("Edm.Guid"), &json!("nope")).is_err());
        assert!(value_of(Some("Geography"), &json!("x")).is_err());
        assert!(value_of(None, &json!([1])).is_err());
    }
}
