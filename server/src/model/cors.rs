//! The table service's properties: its CORS rules, which let pages from other origins call the
//! REST endpoint from a browser, and the logging and metrics settings Azure takes (kept as given
//! and answered back; Trestle logs through tracing and acts on none of them).

use serde::{Deserialize, Serialize};

use super::ValidationError;

/// Most CORS rules the service keeps.
pub const MAX_CORS_RULES: usize = 5;
/// Most origins, or headers, one rule lists.
const MAX_LIST_ENTRIES: usize = 64;
/// The methods a rule may allow.
const METHODS: &[&str] = &[
    "DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH",
];

/// The service's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceProperties {
    /// The CORS rules, in order: the first that matches a request answers it.
    pub cors: Vec<CorsRule>,
    /// The `Logging`, `HourMetrics` and `MinuteMetrics` elements as the client set them (XML),
    /// answered back as they were; `None` until set.
    pub logging: Option<String>,
    /// See `logging`.
    pub hour_metrics: Option<String>,
    /// See `logging`.
    pub minute_metrics: Option<String>,
}

/// One CORS rule: which origins may call with which methods and headers, what the browser may
/// read of the answer, and how long it may keep a preflight's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    /// Origins (`http://host:port`), or `*` for any.
    pub allowed_origins: Vec<String>,
    /// Methods, upper-case.
    pub allowed_methods: Vec<String>,
    /// Request headers, each a name, a prefix ending in `*`, or `*`.
    pub allowed_headers: Vec<String>,
    /// Response headers the page may read, in the same forms.
    pub exposed_headers: Vec<String>,
    /// Seconds a browser may keep a preflight's answer.
    pub max_age_seconds: u32,
}

impl ServiceProperties {
    /// Checks the rules as Azure does: at most [`MAX_CORS_RULES`], each with origins and
    /// methods, methods among Azure's, at most 64 origins and headers of each kind.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.cors.len() > MAX_CORS_RULES {
            return Err(invalid(format!(
                "the service keeps at most {MAX_CORS_RULES} CORS rules; {} were given",
                self.cors.len()
            )));
        }
        for (at, rule) in self.cors.iter().enumerate() {
            rule.validate()
                .map_err(|why| invalid(format!("CORS rule {at}: {why}")))?;
        }
        Ok(())
    }

    /// The first rule that lets `origin` call with `method`, if any.
    pub fn rule_for(&self, origin: &str, method: &str) -> Option<&CorsRule> {
        self.cors
            .iter()
            .find(|rule| rule.allows_origin(origin) && rule.allows_method(method))
    }

    /// The settings as a store keeps them (JSON, so that a later version can add fields).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("service properties serialize")
    }

    /// The settings a store kept, or `None` if the record is not theirs.
    pub fn decode(record: &[u8]) -> Option<ServiceProperties> {
        serde_json::from_slice(record).ok()
    }
}

impl CorsRule {
    fn validate(&self) -> Result<(), String> {
        if self.allowed_origins.is_empty() || self.allowed_methods.is_empty() {
            return Err("it needs at least one allowed origin and one allowed method".into());
        }
        if let Some(method) = self
            .allowed_methods
            .iter()
            .find(|m| !METHODS.contains(&m.as_str()))
        {
            return Err(format!(
                "{method:?} is not a method a rule may allow ({})",
                METHODS.join(", ")
            ));
        }
        for (what, list) in [
            ("origins", &self.allowed_origins),
            ("allowed headers", &self.allowed_headers),
            ("exposed headers", &self.exposed_headers),
        ] {
            if list.len() > MAX_LIST_ENTRIES {
                return Err(format!(
                    "it lists {} {what}; at most {MAX_LIST_ENTRIES}",
                    list.len()
                ));
            }
        }
        Ok(())
    }

    /// Whether the rule allows `origin` (an exact match, ASCII case ignored, or `*`).
    pub fn allows_origin(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(origin))
    }

    /// Whether the rule allows `method`.
    pub fn allows_method(&self, method: &str) -> bool {
        self.allowed_methods.iter().any(|allowed| allowed == method)
    }

    /// Whether the rule allows every one of `headers` (a preflight's comma-separated list).
    pub fn allows_headers(&self, headers: &str) -> bool {
        headers
            .split(',')
            .map(str::trim)
            .filter(|header| !header.is_empty())
            .all(|header| matches_any(&self.allowed_headers, header))
    }

    /// Whether the rule lets a page read the response header `header`.
    pub fn exposes(&self, header: &str) -> bool {
        matches_any(&self.exposed_headers, header)
    }

    /// Whether the rule lets any origin in: its answers then name `*` rather than the origin.
    pub fn any_origin(&self) -> bool {
        self.allowed_origins.iter().any(|allowed| allowed == "*")
    }
}

/// Whether `header` is one of `patterns`: a name (ASCII case ignored), a prefix ending in `*`, or
/// `*`.
fn matches_any(patterns: &[String], header: &str) -> bool {
    patterns
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => header
                .get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(prefix)),
            None => pattern.eq_ignore_ascii_case(header),
        })
}

fn invalid(why: String) -> ValidationError {
    ValidationError::Argument(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        CorsRule {
            allowed_origins: strings(origins),
            allowed_methods: strings(methods),
            allowed_headers: strings(headers),
            exposed_headers: strings(&["x-ms-*"]),
            max_age_seconds: 60,
        }
    }

    #[test]
    fn the_first_rule_matching_origin_and_method_answers() {
        let properties = ServiceProperties {
            cors: vec![
                rule(&["http://a.example"], &["GET"], &["x-ms-*", "accept"]),
                rule(&["*"], &["PUT"], &["*"]),
            ],
            ..ServiceProperties::default()
        };
        properties.validate().unwrap();
        let get = properties.rule_for("http://A.example", "GET").unwrap();
        assert!(!get.any_origin());
        assert!(get.allows_headers("X-MS-Version, Accept"));
        assert!(!get.allows_headers("x-ms-version, authorization"));
        assert!(get.exposes("x-ms-request-id") && !get.exposes("etag"));
        assert!(properties.rule_for("http://b.example", "GET").is_none());
        assert!(properties
            .rule_for("http://b.example", "PUT")
            .unwrap()
            .any_origin());
        assert!(properties.rule_for("http://a.example", "DELETE").is_none());
        let record = properties.encode();
        assert_eq!(ServiceProperties::decode(&record), Some(properties));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let six = ServiceProperties {
            cors: vec![rule(&["*"], &["GET"], &[]); 6],
            ..ServiceProperties::default()
        };
        assert!(six
            .validate()
            .unwrap_err()
            .to_string()
            .contains("at most 5"));
        let many: Vec<String> = (0..65).map(|n| format!("http://{n}.example")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for (bad, why) in [
            (rule(&[], &["GET"], &[]), "at least one"),
            (rule(&["*"], &["FETCH"], &[]), "FETCH"),
            (rule(&many, &["GET"], &[]), "65 origins"),
        ] {
            let properties = ServiceProperties {
                cors: vec![bad],
                ..ServiceProperties::default()
            };
            let error = properties.validate().unwrap_err().to_string();
            assert!(error.contains(why), "{error}");
        }
    }
}
