//! The settings calls (`?comp=`): the table service's properties (CORS rules kept and acted on;
//! logging and metrics settings kept and answered back), its statistics, and each table's stored
//! access policies (its ACL), in Azure's XML.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};

use super::paths::Resource;
use super::xml::{self, Element};
use super::{Answer, Call, Failure};
use crate::error::ErrorCode;
use crate::model::{AccessPolicy, CorsRule, ServiceProperties, Ticks};

/// Azure's logging settings with everything off: what the service answers until they are set.
const LOGGING_OFF: &str = "<Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read>\
    <Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>";
/// Azure's metrics settings (of `HourMetrics` or `MinuteMetrics`) with everything off.
const METRICS_OFF: &str = "<Version>1.0</Version><Enabled>false</Enabled>\
    <RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>";
const DECLARATION: &str = r#"<?xml version="1.0" encoding="utf-8"?>"#;

/// Answers `?comp=<setting>` on `resource`.
pub(super) async fn serve(call: &Call<'_>, resource: Resource, setting: &str) -> Answer {
    let (api, request, access) = (call.api, call.request, call.access);
    match (setting, resource, &request.method) {
        ("properties", Resource::Service, &Method::GET) => {
            access.list_tables()?;
            let properties = api
                .executor
                .blocking(|engine| engine.service_properties())
                .await?;
            Ok(xml_answer(properties_xml(&properties)))
        }
        ("properties", Resource::Service, &Method::PUT) => {
            access.manage_service()?;
            let given = xml::parse(&request.body).map_err(invalid_xml)?;
            let update = PropertiesUpdate::of(&given).map_err(invalid_xml)?;
            api.executor
                .blocking(move |engine| {
                    let mut properties = engine.service_properties()?;
                    update.apply(&mut properties);
                    engine.set_service_properties(&properties)
                })
                .await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        ("stats", Resource::Service, &Method::GET) => {
            if request.secondary_path.is_none() {
                // As Azure: statistics are the secondary location's (the emulator answers 400).
                return Err(Failure::of(
                    ErrorCode::InvalidUri,
                    "the service's statistics are served on the secondary location only: \
                     /devstoreaccount1-secondary/?restype=service&comp=stats",
                ));
            }
            access.list_tables()?;
            Ok(xml_answer(stats_xml()))
        }
        ("acl", Resource::Entities(table), &Method::GET) => {
            access.manage_table(&table)?;
            let policies = api
                .executor
                .blocking(move |engine| engine.access_policies(&table))
                .await?;
            Ok(xml_answer(policies_xml(&policies)))
        }
        ("acl", Resource::Entities(table), &Method::PUT) => {
            access.manage_table(&table)?;
            let policies = parse_policies(&request.body)?;
            api.executor
                .blocking(move |engine| engine.set_access_policies(&table, policies))
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(request.not_served("")),
    }
}

fn invalid_xml(why: String) -> Failure {
    Failure::of(ErrorCode::InvalidXmlDocument, why)
}

/// The properties in Azure's XML.
fn properties_xml(properties: &ServiceProperties) -> String {
    let metrics = |name: &str, kept: &Option<String>| match kept {
        Some(kept) => kept.clone(),
        None => format!("<{name}>{METRICS_OFF}</{name}>"),
    };
    let rules: String = properties.cors.iter().map(rule_xml).collect();
    format!(
        "{DECLARATION}<StorageServiceProperties>{}{}{}<Cors>{rules}</Cors></StorageServiceProperties>",
        properties.logging.as_deref().unwrap_or(LOGGING_OFF),
        metrics("HourMetrics", &properties.hour_metrics),
        metrics("MinuteMetrics", &properties.minute_metrics),
    )
}

fn rule_xml(rule: &CorsRule) -> String {
    let list = |list: &[String]| xml::escape(&list.join(",")).into_owned();
    format!(
        "<CorsRule><AllowedOrigins>{}</AllowedOrigins><AllowedMethods>{}</AllowedMethods>\
         <AllowedHeaders>{}</AllowedHeaders><ExposedHeaders>{}</ExposedHeaders>\
         <MaxAgeInSeconds>{}</MaxAgeInSeconds></CorsRule>",
        list(&rule.allowed_origins),
        list(&rule.allowed_methods),
        list(&rule.allowed_headers),
        list(&rule.exposed_headers),
        rule.max_age_seconds
    )
}

/// What a Set Service Properties body sets: each section it gives replaces the one kept, each it
/// leaves out stays, as on Azure.
struct PropertiesUpdate {
    logging: Option<String>,
    hour_metrics: Option<String>,
    minute_metrics: Option<String>,
    cors: Option<Vec<CorsRule>>,
}

impl PropertiesUpdate {
    fn of(given: &Element) -> Result<PropertiesUpdate, String> {
        if given.name != "StorageServiceProperties" {
            return Err(format!(
                "the body's root is <{}>, not <StorageServiceProperties>",
                given.name
            ));
        }
        let section = |name: &str| given.child(name).map(Element::to_xml);
        let cors = given.child("Cors").map(|cors| {
            cors.children_named("CorsRule")
                .map(parse_rule)
                .collect::<Result<Vec<_>, _>>()
        });
        Ok(PropertiesUpdate {
            logging: section("Logging"),
            hour_metrics: section("HourMetrics"),
            minute_metrics: section("MinuteMetrics"),
            cors: cors.transpose()?,
        })
    }

    fn apply(self, properties: &mut ServiceProperties) {
        let keep = |given: Option<String>, kept: &mut Option<String>| {
            if given.is_some() {
                *kept = given;
            }
        };
        keep(self.logging, &mut properties.logging);
        keep(self.hour_metrics, &mut properties.hour_metrics);
        keep(self.minute_metrics, &mut properties.minute_metrics);
        if let Some(cors) = self.cors {
            properties.cors = cors;
        }
    }
}

fn parse_rule(rule: &Element) -> Result<CorsRule, String> {
    let list = |name: &str| -> Vec<String> {
        rule.text_of(name)
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let max_age = rule.text_of("MaxAgeInSeconds").unwrap_or("0");
    Ok(CorsRule {
        allowed_origins: list("AllowedOrigins"),
        allowed_methods: list("AllowedMethods"),
        allowed_headers: list("AllowedHeaders"),
        exposed_headers: list("ExposedHeaders"),
        max_age_seconds: max_age
            .parse()
            .map_err(|_| format!("a CORS rule's MaxAgeInSeconds {max_age:?} is not a number"))?,
    })
}

/// Statistics as Azure answers them for the primary location of an account without
/// geo-replication of its own: Trestle has one location, always in sync with itself.
fn stats_xml() -> String {
    let now = httpdate::fmt_http_date(std::time::SystemTime::now());
    format!(
        "{DECLARATION}<StorageServiceStats><GeoReplication><Status>live</Status>\
         <LastSyncTime>{now}</LastSyncTime></GeoReplication></StorageServiceStats>"
    )
}

/// A table's policies in Azure's XML.
fn policies_xml(policies: &[AccessPolicy]) -> String {
    let time = |name: &str, at: Option<Ticks>| match at {
        Some(at) => format!("<{name}>{}</{name}>", at.to_rfc3339()),
        None => String::new(),
    };
    let identifiers: String = policies
        .iter()
        .map(|policy| {
            format!(
                "<SignedIdentifier><Id>{}</Id><AccessPolicy>{}{}<Permission>{}</Permission>\
                 </AccessPolicy></SignedIdentifier>",
                xml::escape(&policy.id),
                time("Start", policy.start),
                time("Expiry", policy.expiry),
                policy.permissions
            )
        })
        .collect();
    format!("{DECLARATION}<SignedIdentifiers>{identifiers}</SignedIdentifiers>")
}

/// The policies of a Set Table ACL body (an empty body clears them).
fn parse_policies(body: &[u8]) -> Result<Vec<AccessPolicy>, Failure> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let root = xml::parse(body).map_err(invalid_xml)?;
    if root.name != "SignedIdentifiers" {
        return Err(invalid_xml(format!(
            "the body's root is <{}>, not <SignedIdentifiers>",
            root.name
        )));
    }
    root.children_named("SignedIdentifier")
        .map(|identifier| {
            let policy = identifier.child("AccessPolicy");
            let field = |name: &str| policy.and_then(|policy| policy.text_of(name));
            let time = |name: &str| {
                field(name)
                    .filter(|text| !text.is_empty())
                    .map(|text| {
                        Ticks::parse_rfc3339(text).ok_or_else(|| {
                            invalid_xml(format!("the policy's {name} {text:?} is not a UTC time"))
                        })
                    })
                    .transpose()
            };
            Ok(AccessPolicy {
                id: identifier.text_of("Id").unwrap_or("").to_owned(),
                start: time("Start")?,
                expiry: time("Expiry")?,
                permissions: field("Permission").unwrap_or("").to_owned(),
            })
        })
        .collect()
}

fn xml_answer(body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    response
}
