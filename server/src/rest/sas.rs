//! Shared access signatures: a SAS URL's `sv`, `sp`, `st`, `se`, ... parameters, checked against
//! the account keys and mapped onto the grant Trestle's own scoped tokens carry (one table or all,
//! a key range, permissions, a validity window). A service SAS (`tn`) grants entity operations on
//! one table; an account SAS (`ss`, `srt`) grants by resource type on every table.

use std::net::IpAddr;

use trestle_proto::access::{Grant, KeyBounds, Permissions};
use trestle_proto::datetime;

use super::shared_key::AccountKeys;
use crate::error::ErrorCode;
use crate::model::{AccessPolicy, Ticks};

/// Why a SAS was not accepted, as Azure words and codes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

fn refuse(message: impl Into<String>) -> Refusal {
    Refusal {
        code: ErrorCode::AuthenticationFailed,
        message: message.into(),
    }
}

/// Every field a shared access signature may carry.
pub(crate) const FIELDS: [&str; 16] = [
    "sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "sig", "tn", "spk", "srk", "epk", "erk",
    "si", "ses",
];

/// What a SAS-carrying request brings besides its parameters.
pub(crate) struct Presented<'a> {
    /// The account in the request's path.
    pub(crate) account: &'a str,
    /// The address the request came from (checked against `sip`).
    pub(crate) peer: IpAddr,
    /// Now, in Unix seconds.
    pub(crate) now: i64,
}

/// A shared access signature whose signature holds under one of the account's keys: what it
/// grants is read next ([`Signed::grant`]), with the stored access policy it names, if any.
pub(crate) struct Signed<'a, P> {
    param: P,
    presented: &'a Presented<'a>,
    is_account_sas: bool,
}

/// The SAS whose (percent-decoded) parameters `param` reads, if it is signed by one of `keys`.
pub(crate) fn verify<'a, P: Fn(&str) -> Option<String>>(
    param: P,
    keys: &AccountKeys,
    presented: &'a Presented<'a>,
) -> Result<Signed<'a, P>, Refusal> {
    let field = |name: &str| param(name).unwrap_or_default();
    let version = field("sv");
    if version.is_empty() {
        return Err(refuse(
            "the shared access signature has no signed version (sv)",
        ));
    }
    // An empty bound signs as an absent one would: were it taken as the empty key, removing it
    // would widen the grant without breaking the signature. So it is refused.
    if let Some(name) = ["spk", "srk", "epk", "erk"]
        .into_iter()
        .find(|name| param(name).is_some_and(|value| value.is_empty()))
    {
        return Err(refuse(format!(
            "the shared access signature's key bound {name} is empty; leave it out to leave the \
             range open on that side"
        )));
    }
    let is_account_sas = param("ss").is_some() || param("srt").is_some();
    let to_sign = string_to_sign(&field, presented.account, is_account_sas, &version)?;
    if !keys.signed(to_sign.as_bytes(), &field("sig")) {
        return Err(refuse(
            "the shared access signature does not match its parameters under the account's keys",
        ));
    }
    Ok(Signed {
        param,
        presented,
        is_account_sas,
    })
}

impl<P: Fn(&str) -> Option<String>> Signed<'_, P> {
    /// The table and stored access policy (`tn`, `si`) the signature names, if it names one: its
    /// fields then come from that policy of the table, to be read before [`Signed::grant`].
    pub(crate) fn named_policy(&self) -> Option<(String, String)> {
        Some(((self.param)("tn")?, (self.param)("si")?))
    }

    /// What the signature grants, if it is valid for this request; `policy` is the stored access
    /// policy it names as its table has it now (`None`: the table has none of that id).
    pub(crate) fn grant(self, policy: Option<&AccessPolicy>) -> Result<Grant, Refusal> {
        let param = &self.param;
        let field = |name: &str| param(name).unwrap_or_default();
        let signed = signed_fields(param, self.is_account_sas, policy)?;
        let (not_before, expires) = validity(&signed.start, &signed.expiry, self.presented.now)?;
        check_origin(param, self.presented)?;
        let mut grant = Grant {
            permissions: Permissions::default(),
            table: None,
            partitions: KeyBounds::default(),
            rows: KeyBounds::default(),
            not_before,
            expires,
        };
        if self.is_account_sas {
            grant.permissions =
                account_permissions(&field("ss"), &field("srt"), &signed.permissions)?;
        } else {
            grant.permissions = table_permissions(&signed.permissions)?;
            grant.table = Some(field("tn"));
            (grant.partitions, grant.rows) =
                key_range(param("spk"), param("srk"), param("epk"), param("erk"))?;
        }
        Ok(grant)
    }
}

/// The start, expiry and permissions a SAS grants: its own, or those of the stored access policy
/// it names (a field given by both is refused, as on Azure).
struct SignedFields {
    start: String,
    expiry: String,
    permissions: String,
}

fn signed_fields(
    param: &dyn Fn(&str) -> Option<String>,
    is_account_sas: bool,
    policy: Option<&AccessPolicy>,
) -> Result<SignedFields, Refusal> {
    let own = |name: &str| param(name).unwrap_or_default();
    let Some(id) = param("si") else {
        return Ok(SignedFields {
            start: own("st"),
            expiry: own("se"),
            permissions: own("sp"),
        });
    };
    let Some(policy) = policy.filter(|_| !is_account_sas) else {
        return Err(refuse(format!(
            "the shared access signature names the stored access policy {id:?}, which its table \
             does not have (it was removed, or never set); an account SAS names none"
        )));
    };
    let time = |at: Option<Ticks>| at.map(Ticks::to_rfc3339).unwrap_or_default();
    let pick = |name: &str, from_policy: String| match (own(name), from_policy) {
        (mine, theirs) if !mine.is_empty() && !theirs.is_empty() => Err(refuse(format!(
            "the shared access signature gives {name} and so does the stored access policy \
             {id:?} it names; give it in one of them"
        ))),
        (mine, theirs) if mine.is_empty() => Ok(theirs),
        (mine, _) => Ok(mine),
    };
    Ok(SignedFields {
        start: pick("st", time(policy.start))?,
        expiry: pick("se", time(policy.expiry))?,
        permissions: pick("sp", policy.permissions.clone())?,
    })
}

/// The text a SAS signs: an account SAS's fields, or a table SAS's (naming its table).
fn string_to_sign(
    field: &dyn Fn(&str) -> String,
    account: &str,
    is_account_sas: bool,
    version: &str,
) -> Result<String, Refusal> {
    Ok(if is_account_sas {
        let mut text = format!("{account}\n");
        for name in ["sp", "ss", "srt", "st", "se", "sip", "spr", "sv"] {
            text.push_str(&field(name));
            text.push('\n');
        }
        if version >= "2020-12-06" {
            text.push_str(&field("ses"));
            text.push('\n');
        }
        text
    } else {
        let table = field("tn");
        if table.is_empty() {
            return Err(refuse(
                "the shared access signature names no table (tn) and is not an account SAS (ss, srt)",
            ));
        }
        let resource = format!("/table/{account}/{}", table.to_ascii_lowercase());
        [
            field("sp"),
            field("st"),
            field("se"),
            resource,
            field("si"),
            field("sip"),
            field("spr"),
            version.to_owned(),
            field("spk"),
            field("srk"),
            field("epk"),
            field("erk"),
        ]
        .join("\n")
    })
}

/// Refuses a request the SAS's protocol (`spr`) or address range (`sip`) does not allow.
fn check_origin(
    param: &dyn Fn(&str) -> Option<String>,
    presented: &Presented<'_>,
) -> Result<(), Refusal> {
    if param("spr").as_deref() == Some("https") {
        return Err(Refusal {
            code: ErrorCode::AuthorizationProtocolMismatch,
            message: "the shared access signature allows HTTPS only (spr=https); this endpoint \
                      serves HTTP"
                .into(),
        });
    }
    if let Some(range) = param("sip") {
        if !ip_in_range(presented.peer, &range)? {
            return Err(Refusal {
                code: ErrorCode::AuthorizationSourceIPMismatch,
                message: format!(
                    "the shared access signature allows addresses {range}; this request comes \
                     from {}",
                    presented.peer
                ),
            });
        }
    }
    Ok(())
}

/// `st` and `se` as Unix seconds; refused outside the window.
fn validity(start: &str, expiry: &str, now: i64) -> Result<(i64, i64), Refusal> {
    let seconds = |text: &str, what: &str| {
        let full = if text.contains('T') {
            text.to_owned()
        } else {
            format!("{text}T00:00:00Z")
        };
        datetime::parse(&full)
            .map(|ticks| ticks.div_euclid(datetime::TICKS_PER_SECOND))
            .ok_or_else(|| {
                refuse(format!(
                    "the signed {what} {text:?} is not an ISO 8601 UTC time"
                ))
            })
    };
    if expiry.is_empty() {
        return Err(refuse(
            "the shared access signature has no signed expiry (se)",
        ));
    }
    let expires = seconds(expiry, "expiry")?;
    let not_before = if start.is_empty() {
        i64::MIN
    } else {
        seconds(start, "start")?
    };
    if now < not_before || now >= expires {
        return Err(refuse(format!(
            "the shared access signature is valid from {} to {expiry}, not now",
            if start.is_empty() { "its issue" } else { start }
        )));
    }
    Ok((not_before, expires))
}

/// A service SAS's letters (`raud`).
fn table_permissions(letters: &str) -> Result<Permissions, Refusal> {
    letters
        .chars()
        .try_fold(Permissions::default(), |set, letter| {
            let permission = match letter {
                'r' => Permissions::READ,
                'a' => Permissions::ADD,
                'u' => Permissions::UPDATE,
                'd' => Permissions::DELETE,
                other => {
                    return Err(refuse(format!(
                        "a table SAS permission is one of r, a, u, d, not {other:?}"
                    )))
                }
            };
            Ok(set.union(permission))
        })
}

/// An account SAS's permissions on the table service, by resource type: objects (`o`) take the
/// entity letters (`w` writes: add and update); the container (`c`) and service (`s`) levels list
/// tables with `l`; creating and deleting tables needs the container level with `d` and one of
/// `c`, `a` or `w` (Trestle grants the two together).
fn account_permissions(services: &str, types: &str, letters: &str) -> Result<Permissions, Refusal> {
    if !services.contains('t') {
        return Err(Refusal {
            code: ErrorCode::AuthorizationServiceMismatch,
            message: format!(
                "the account SAS is for services {services:?}, not the table service (t)"
            ),
        });
    }
    if let Some(other) = letters.chars().find(|l| !"rwdlacup".contains(*l)) {
        return Err(refuse(format!(
            "an account SAS permission is one of r, w, d, l, a, c, u, p, not {other:?}"
        )));
    }
    let has = |letter| letters.contains(letter);
    let mut set = Permissions::default();
    if types.contains('o') {
        for (letter, permission) in [
            ('r', Permissions::READ),
            ('a', Permissions::ADD),
            ('u', Permissions::UPDATE),
            ('d', Permissions::DELETE),
            ('w', Permissions::ADD.union(Permissions::UPDATE)),
        ] {
            if has(letter) {
                set = set.union(permission);
            }
        }
    }
    if (types.contains('c') || types.contains('s')) && has('l') {
        set = set.union(Permissions::LIST_TABLES);
    }
    if types.contains('c') && has('d') && (has('c') || has('a') || has('w')) {
        set = set.union(Permissions::MANAGE_TABLES);
    }
    Ok(set)
}

/// The smallest string after `key` in the store's byte order.
fn just_after(key: String) -> String {
    key + "\0"
}

/// A service SAS's inclusive (PartitionKey, RowKey) bounds as a partition range and a row range.
/// Azure bounds the pair in order; Trestle's grants are a partition range with a row range in
/// each, which says the same when there are no row bounds or the partition bounds are one key.
fn key_range(
    start_partition: Option<String>,
    start_row: Option<String>,
    end_partition: Option<String>,
    end_row: Option<String>,
) -> Result<(KeyBounds, KeyBounds), Refusal> {
    let one_partition = start_partition.is_some() && start_partition == end_partition;
    if (start_row.is_some() || end_row.is_some()) && !one_partition {
        return Err(refuse(
            "Trestle takes a SAS key range as a range of partitions (spk, epk) or a range of rows \
             in one partition (spk = epk with srk, erk); this one bounds rows across partitions",
        ));
    }
    let partitions = KeyBounds {
        start: start_partition,
        end: end_partition.map(just_after),
    };
    let rows = KeyBounds {
        start: start_row,
        end: end_row.map(just_after),
    };
    Ok((partitions, rows))
}

/// Whether `peer` is `range` (`a.b.c.d`) or within it (`a.b.c.d-e.f.g.h`).
fn ip_in_range(peer: IpAddr, range: &str) -> Result<bool, Refusal> {
    let (low, high) = range.split_once('-').unwrap_or((range, range));
    let address = |text: &str| {
        text.trim().parse::<IpAddr>().map_err(|_| {
            refuse(format!(
                "the signed IP range {range:?} is not an address range"
            ))
        })
    };
    let (low, high) = (address(low)?, address(high)?);
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    Ok(low <= peer && peer <= high)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Option<String> {
        Some(k.to_owned())
    }

    #[test]
    fn key_ranges_map_onto_partitions_and_rows() {
        let (partitions, rows) = key_range(key("a"), None, key("c"), None).unwrap();
        assert!(partitions.contains("a") && partitions.contains("c"));
        assert!(!partitions.contains("c0") && rows.is_everything());
        let (partitions, rows) = key_range(key("p"), key("1"), key("p"), key("5")).unwrap();
        assert!(partitions.contains("p") && !partitions.contains("q"));
        assert!(rows.contains("1") && rows.contains("5") && !rows.contains("50"));
        assert!(key_range(key("a"), key("1"), key("b"), None).is_err());
    }

    #[test]
    fn account_letters_map_by_resource_type() {
        let all = account_permissions("t", "sco", "rwdlacu").unwrap();
        assert_eq!(all.letters(), "raudlc");
        assert_eq!(account_permissions("t", "o", "rl").unwrap().letters(), "r");
        assert_eq!(account_permissions("t", "c", "c").unwrap().letters(), "");
        assert!(account_permissions("b", "o", "r").is_err());
        assert!(account_permissions("t", "o", "rz").is_err());
    }

    #[test]
    fn an_empty_key_bound_is_refused_as_it_signs_like_an_absent_one() {
        let keys = AccountKeys::of(&crate::auth::Authenticator::open());
        let presented = Presented {
            account: "devstoreaccount1",
            peer: "127.0.0.1".parse().unwrap(),
            now: 0,
        };
        for bound in ["spk", "epk", "srk", "erk"] {
            let params = [
                ("sv", "2019-02-02"),
                ("tn", "t"),
                ("sp", "r"),
                ("se", "2099-01-01T00:00:00Z"),
                (bound, ""),
                ("sig", "c2ln"),
            ];
            let param = |name: &str| {
                params
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            let refusal = verify(param, &keys, &presented).err().expect("refused");
            assert!(
                refusal.message.contains(&format!("{bound} is empty")),
                "{refusal:?}"
            );
        }
    }

    #[test]
    fn windows_and_addresses() {
        let now = datetime::parse("2026-11-25T12:00:00Z").unwrap() / datetime::TICKS_PER_SECOND;
        assert!(validity("", "2026-11-25T13:00:00Z", now).is_ok());
        assert!(validity("2026-11-25T12:30:00Z", "2026-11-25T13:00:00Z", now).is_err());
        assert!(validity("", "2026-11-25", now).is_err());
        assert!(validity("", "", now).is_err());
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(ip_in_range(local, "127.0.0.1").unwrap());
        assert!(ip_in_range(local, "127.0.0.0-127.0.0.9").unwrap());
        assert!(!ip_in_range(local, "10.0.0.1").unwrap());
        assert!(ip_in_range(local, "nonsense").is_err());
    }
}
