//! The resource a REST request names, from its path: `/<account>/Tables`,
//! `/<account>/Tables('<name>')`, `/<account>/<table>()` (a query),
//! `/<account>/<table>(PartitionKey='<pk>',RowKey='<rk>')` (one entity) or `/<account>/<table>`.

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource {
    /// The account itself (service properties: `/<account>/?restype=service&comp=properties`).
    Service,
    /// The table collection.
    Tables,
    /// An entity group transaction (`$batch`).
    Batch,
    /// One table, in the collection (`Tables('name')`).
    Table(String),
    /// A table's entities (`name()` or `name`).
    Entities(String),
    /// One entity.
    Entity {
        table: String,
        partition_key: String,
        row_key: String,
    },
}

/// The account and resource of a raw (percent-encoded) path; `None` if it names neither.
pub(crate) fn parse(path: &str) -> Option<(String, Resource)> {
    let path = path.strip_prefix('/')?;
    let (account, rest) = path.split_once('/')?;
    // A trailing slash names the same resource (Azure's own test helpers send one).
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let rest = percent_decode(rest)?;
    let resource = if rest.is_empty() {
        Resource::Service
    } else if rest == "Tables" || rest == "Tables()" {
        Resource::Tables
    } else if rest == "$batch" {
        Resource::Batch
    } else if let Some(name) = rest
        .strip_prefix("Tables('")
        .and_then(|r| r.strip_suffix("')"))
    {
        Resource::Table(name.to_owned())
    } else if let Some((table, args)) = rest.split_once('(') {
        let args = args.strip_suffix(')')?;
        if args.is_empty() {
            Resource::Entities(table.to_owned())
        } else {
            let (partition_key, row_key) = entity_keys(args)?;
            Resource::Entity {
                table: table.to_owned(),
                partition_key,
                row_key,
            }
        }
    } else if !rest.is_empty() && !rest.contains('/') {
        Resource::Entities(rest)
    } else {
        return None;
    };
    Some((account.to_owned(), resource))
}

/// `PartitionKey='a',RowKey='b'` (quotes doubled inside) into the two keys.
fn entity_keys(args: &str) -> Option<(String, String)> {
    let rest = args.strip_prefix("PartitionKey='")?;
    let (partition_key, rest) = quoted_until(rest)?;
    let rest = rest.strip_prefix(",RowKey='")?;
    let (row_key, rest) = quoted_until(rest)?;
    rest.is_empty().then_some((partition_key, row_key))
}

/// The text up to the closing quote (a doubled quote stands for one), and what follows it.
fn quoted_until(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().map(|(_, c)| *c) == Some('\'') {
                out.push('\'');
                chars.next();
            } else {
                return Some((out, &text[at + 1..]));
            }
        } else {
            out.push(c);
        }
    }
    None
}

/// Decodes `%XX` escapes (the result must be UTF-8).
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_resources() {
        let parsed = |p| parse(p).map(|(_, r)| r);
        assert_eq!(parsed("/devstoreaccount1/Tables"), Some(Resource::Tables));
        assert_eq!(parsed("/devstoreaccount1/"), Some(Resource::Service));
        assert_eq!(
            parsed("/devstoreaccount1/Tables('Orders')"),
            Some(Resource::Table("Orders".into()))
        );
        assert_eq!(
            parsed("/devstoreaccount1/Orders()"),
            Some(Resource::Entities("Orders".into()))
        );
        assert_eq!(
            parsed("/a/Orders(PartitionKey='p%27%27q',RowKey='it''s%20x')"),
            Some(Resource::Entity {
                table: "Orders".into(),
                partition_key: "p'q".into(),
                row_key: "it's x".into(),
            })
        );
        for slashed in ["/devstoreaccount1/Tables/", "/devstoreaccount1/Tables()/"] {
            assert_eq!(parsed(slashed), Some(Resource::Tables), "{slashed}");
        }
        assert_eq!(parsed("/a/$batch/"), Some(Resource::Batch));
        assert_eq!(
            parsed("/a/Orders/"),
            Some(Resource::Entities("Orders".into()))
        );
        assert_eq!(parsed("/a/Orders(PartitionKey='p')"), None);
        assert_eq!(parsed("/nothing"), None);
    }
}
