//! Stored access policies: up to five named sets of table permissions and a validity window kept
//! on a table. A shared access signature may name one (`si`) instead of carrying those fields
//! itself, so that changing or removing the policy revokes every signature naming it.

use serde::{Deserialize, Serialize};

use super::{quoted, Ticks, ValidationError};

/// Most stored access policies one table keeps.
pub const MAX_ACCESS_POLICIES: usize = 5;
/// Longest policy id, in characters.
pub const MAX_POLICY_ID_CHARS: usize = 64;
/// The permission letters of a table policy, in Azure's order: query, add, update, delete.
const PERMISSION_LETTERS: &str = "raud";

/// One stored access policy of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessPolicy {
    /// Its id, unique in the table: what a signature names in `si`.
    pub id: String,
    /// When signatures naming it start to be valid, if the policy says.
    pub start: Option<Ticks>,
    /// When they stop being valid, if the policy says.
    pub expiry: Option<Ticks>,
    /// What they allow, as letters of `raud` in that order (empty: the signature says).
    pub permissions: String,
}

/// Checks a table's policies as Azure does: at most [`MAX_ACCESS_POLICIES`], ids of 1 to
/// [`MAX_POLICY_ID_CHARS`] characters and distinct, permissions among `raud` each at most once
/// (put in Azure's order), a start before the expiry.
pub fn validate_policies(policies: &mut [AccessPolicy]) -> Result<(), ValidationError> {
    if policies.len() > MAX_ACCESS_POLICIES {
        return Err(ValidationError::Argument(format!(
            "a table keeps at most {MAX_ACCESS_POLICIES} stored access policies; {} were given",
            policies.len()
        )));
    }
    for at in 0..policies.len() {
        let policy = &policies[at];
        let id_chars = policy.id.chars().count();
        if id_chars == 0 || id_chars > MAX_POLICY_ID_CHARS {
            return Err(ValidationError::Argument(format!(
                "a stored access policy's id has 1 to {MAX_POLICY_ID_CHARS} characters; {} has {id_chars}",
                quoted(&policy.id)
            )));
        }
        if policies[..at].iter().any(|earlier| earlier.id == policy.id) {
            return Err(ValidationError::Argument(format!(
                "the stored access policy {} is given twice",
                quoted(&policy.id)
            )));
        }
        if let (Some(start), Some(expiry)) = (policy.start, policy.expiry) {
            if start >= expiry {
                return Err(ValidationError::Argument(format!(
                    "the stored access policy {} starts at or after its expiry",
                    quoted(&policy.id)
                )));
            }
        }
        policies[at].permissions = canonical_permissions(&policies[at])?;
    }
    Ok(())
}

/// The policy's permission letters in Azure's order, or why they are not permissions.
fn canonical_permissions(policy: &AccessPolicy) -> Result<String, ValidationError> {
    let letters = &policy.permissions;
    let known = letters.chars().all(|c| PERMISSION_LETTERS.contains(c));
    let once = PERMISSION_LETTERS
        .chars()
        .all(|letter| letters.matches(letter).count() <= 1);
    if !known || !once {
        return Err(ValidationError::Argument(format!(
            "the stored access policy {} has permissions {}; a table policy takes each of r (query), a (add), u (update) and d (delete) at most once",
            quoted(&policy.id),
            quoted(letters)
        )));
    }
    Ok(PERMISSION_LETTERS
        .chars()
        .filter(|letter| letters.contains(*letter))
        .collect())
}

/// The policies as a store keeps them (JSON, so that a later version can add fields).
pub fn encode_policies(policies: &[AccessPolicy]) -> Vec<u8> {
    serde_json::to_vec(policies).expect("policies serialize")
}

/// The policies a store kept, or `None` if the record is not theirs.
pub fn decode_policies(record: &[u8]) -> Option<Vec<AccessPolicy>> {
    serde_json::from_slice(record).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(id: &str, permissions: &str) -> AccessPolicy {
        AccessPolicy {
            id: id.into(),
            start: Some(Ticks(10)),
            expiry: Some(Ticks(20)),
            permissions: permissions.into(),
        }
    }

    #[test]
    fn policies_are_checked_and_their_permissions_put_in_order() {
        let mut policies = vec![policy("reader", "r"), policy("writer", "dua")];
        validate_policies(&mut policies).unwrap();
        assert_eq!(policies[1].permissions, "aud");
        let record = encode_policies(&policies);
        assert_eq!(decode_policies(&record), Some(policies));
        assert_eq!(decode_policies(b"not json"), None);
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let six: Vec<_> = (0..6).map(|n| policy(&format!("p{n}"), "r")).collect();
        let too_long = policy(&"x".repeat(65), "r");
        let backwards = AccessPolicy {
            start: Some(Ticks(30)),
            ..policy("late", "r")
        };
        for (mut policies, why) in [
            (six, "at most 5"),
            (vec![policy("", "r")], "1 to 64"),
            (vec![too_long], "1 to 64"),
            (vec![policy("a", "r"), policy("a", "u")], "twice"),
            (vec![policy("a", "rw")], "permissions"),
            (vec![policy("a", "rr")], "permissions"),
            (vec![backwards], "expiry"),
        ] {
            let error = validate_policies(&mut policies).unwrap_err().to_string();
            assert!(error.contains(why), "{error}");
        }
        let mut open = vec![AccessPolicy {
            start: None,
            expiry: None,
            ..policy("open", "")
        }];
        validate_policies(&mut open).unwrap();
    }
}
