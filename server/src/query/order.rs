//! Ordering a query's matches by property paths (`order_by`, Trestle's own): each term a path
//! (a property, `PartitionKey`, `RowKey`, `Timestamp`, or members and positions into a document)
//! ascending or descending, in the EDM type order declared indexes use; ties broken by the keys.
//!
//! Bounded by construction: a sorted page keeps only its best `page_size` matches, within the
//! page's byte budget ([`TopK`]), and sorts at most [`MAX_SORTED_MATCHES`] matches (refused past
//! it, naming the index to declare); each entity's sort key costs at most [`MAX_ORDER_TERMS`]
//! path lookups, each bounded by the document bound as a filter's are (`filter/cost.rs` charges
//! the filter itself to the request's work budget).

use std::collections::BinaryHeap;

use super::paths::{check_path, value_at};
use crate::model::{
    put_escaped, put_value, IndexDefinition, IndexScope, Ticks, ValidationError, ValueRef,
};

/// The most terms one `order_by` has.
pub const MAX_ORDER_TERMS: usize = 4;
/// The most matches one sorted page sorts; a query with more needs an index.
pub const MAX_SORTED_MATCHES: u64 = 1_000_000;

/// The sort key of an entity lacking a term's value: before every value ascending, after every
/// value descending (type tags start above it).
const MISSING: u8 = 0x00;

/// One term of an ordering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderTerm {
    /// What to order by.
    pub path: String,
    /// Greatest first.
    pub descending: bool,
}

/// A checked ordering: one to [`MAX_ORDER_TERMS`] terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderBy {
    terms: Vec<OrderTerm>,
}

impl OrderBy {
    /// Checks the number of terms and each path; no terms is no ordering (key order).
    pub fn new(terms: Vec<OrderTerm>) -> Result<OrderBy, ValidationError> {
        if terms.len() > MAX_ORDER_TERMS {
            return Err(ValidationError::Argument(format!(
                "{} order_by terms; a query orders by at most {MAX_ORDER_TERMS}",
                terms.len()
            )));
        }
        for term in &terms {
            if !is_system(&term.path) {
                check_path(&term.path, "order_by")?;
            }
        }
        Ok(OrderBy { terms })
    }

    /// The ordering OData's `$orderby` writes (`Age desc, Address/City`): terms separated by
    /// commas, each a path, then optionally `asc` or `desc` after a space.
    pub fn parse_odata(text: &str) -> Result<OrderBy, ValidationError> {
        let terms = text.split(',').map(|term| {
            let mut words = term.split_whitespace();
            let path = words.next().unwrap_or_default().to_owned();
            let descending = match words.next() {
                None | Some("asc") => false,
                Some("desc") => true,
                Some(other) => {
                    return Err(ValidationError::Argument(format!(
                        "$orderby term {:?} ends in {other:?}; after a path, only asc or desc",
                        term.trim()
                    )))
                }
            };
            if path.is_empty() || words.next().is_some() {
                return Err(ValidationError::Argument(format!(
                    "$orderby term {:?} is not a path followed by asc or desc",
                    term.trim()
                )));
            }
            Ok(OrderTerm { path, descending })
        });
        OrderBy::new(terms.collect::<Result<_, _>>()?)
    }

    /// Whether there is no ordering (the query comes in key or index order).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, in order.
    pub fn terms(&self) -> &[OrderTerm] {
        &self.terms
    }

    /// The sort key of the entity with these keys and timestamp (`property` looking a property
    /// up by name): each term's value encoded as indexes encode it (byte-complemented when
    /// descending: the encodings are prefix-free, so that reverses their order), then the keys.
    /// Distinct for distinct entities, so a page resumes exactly after the last one it returned.
    pub fn sort_key<'a>(
        &self,
        partition_key: &'a str,
        row_key: &'a str,
        timestamp: Ticks,
        property: impl Fn(&str) -> Option<ValueRef<'a>>,
    ) -> Vec<u8> {
        let mut key = Vec::with_capacity(32);
        for term in &self.terms {
            let start = key.len();
            let value = match term.path.as_str() {
                "PartitionKey" => Some(ValueRef::String(partition_key)),
                "RowKey" => Some(ValueRef::String(row_key)),
                "Timestamp" => Some(ValueRef::DateTime(timestamp)),
                path => value_at(path, &property),
            };
            match value {
                Some(value) => put_value(&mut key, value),
                None => key.push(MISSING),
            }
            if term.descending {
                key[start..].iter_mut().for_each(|byte| *byte = !*byte);
            }
        }
        put_escaped(&mut key, partition_key.as_bytes());
        put_escaped(&mut key, row_key.as_bytes());
        key
    }

    /// Whether reading `index` in its order (ascending) yields this ordering exactly, ties
    /// included, so a query through it needs no sort: every term ascending on the index's paths
    /// in its order, one value per entity (not multi-valued), and for a `PARTITION` index one
    /// partition (`one_partition`). An index's entries sort by its values, then by the keys
    /// (a unique index's values alone are distinct), as [`OrderBy::sort_key`] does; the entities
    /// the index leaves out (lacking a value) are outside a query through it anyway.
    pub fn served_by(&self, index: &IndexDefinition, one_partition: bool) -> bool {
        !self.terms.is_empty()
            && !index.is_multi_valued()
            && (index.scope == IndexScope::Table || one_partition)
            && self.terms.len() == index.properties.len()
            && (self.terms.iter().zip(&index.properties))
                .all(|(term, path)| !term.descending && &term.path == path)
    }

    /// What an ordering's fingerprint holds (for [`super::QuerySpec::shape`]).
    pub(crate) fn shape_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for term in &self.terms {
            put_escaped(&mut bytes, term.path.as_bytes());
            bytes.push(u8::from(term.descending));
        }
        bytes
    }

    /// The refusal of a sort over more than [`MAX_SORTED_MATCHES`] matches: it names the index
    /// that would serve the query's order.
    pub fn too_many_matches(&self) -> ValidationError {
        let paths: Vec<&str> = self.terms.iter().map(|term| term.path.as_str()).collect();
        ValidationError::Argument(format!(
            "order_by sorts at most {MAX_SORTED_MATCHES} matches, and this query has more: \
             narrow it, or declare an index on [{}] (CreateIndex) and query through it (index)",
            paths.join(", ")
        ))
    }
}

fn is_system(path: &str) -> bool {
    matches!(path, "PartitionKey" | "RowKey" | "Timestamp")
}

/// One match a [`TopK`] keeps: its sort key, its size and what the caller keeps of it.
#[derive(Debug)]
struct Kept<T> {
    sort_key: Vec<u8>,
    bytes: usize,
    item: T,
}

impl<T> PartialEq for Kept<T> {
    fn eq(&self, other: &Self) -> bool {
        self.sort_key == other.sort_key
    }
}

impl<T> Eq for Kept<T> {}

impl<T> PartialOrd for Kept<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Kept<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_key.cmp(&other.sort_key)
    }
}

/// The first matches of a sorted page: of the matches offered after `after` (the last sort key
/// the previous page returned), the best `limit`, and no more than `byte_budget` bytes of them
/// (at least one, whatever its size); the set kept is always the best of those offered.
#[derive(Debug)]
pub struct TopK<T> {
    after: Option<Vec<u8>>,
    limit: usize,
    byte_budget: usize,
    bytes: usize,
    /// The kept matches, worst on top.
    kept: BinaryHeap<Kept<T>>,
    /// Matches offered after `after`.
    offered: u64,
}

impl<T> TopK<T> {
    /// Keeps the best `limit` matches after `after` within `byte_budget` bytes.
    pub fn new(after: Option<Vec<u8>>, limit: usize, byte_budget: usize) -> TopK<T> {
        TopK {
            after,
            limit: limit.max(1),
            byte_budget,
            bytes: 0,
            kept: BinaryHeap::new(),
            offered: 0,
        }
    }

    /// Offers a match with this sort key and size; `item` makes what is kept of it, only if it
    /// is kept.
    pub fn offer(&mut self, sort_key: Vec<u8>, bytes: usize, item: impl FnOnce() -> T) {
        if self.after.as_ref().is_some_and(|after| sort_key <= *after) {
            return;
        }
        self.offered += 1;
        let full = self.kept.len() >= self.limit;
        if full
            && self
                .kept
                .peek()
                .is_some_and(|worst| sort_key >= worst.sort_key)
        {
            return;
        }
        self.bytes += bytes;
        self.kept.push(Kept {
            sort_key,
            bytes,
            item: item(),
        });
        while self.kept.len() > self.limit || (self.bytes > self.byte_budget && self.kept.len() > 1)
        {
            let worst = self.kept.pop().expect("more than one kept");
            self.bytes -= worst.bytes;
            // Fewer fit the budget: keep no more than that from now on.
            self.limit = self.limit.min(self.kept.len());
        }
    }

    /// Matches offered after `after`, kept or not.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// The kept matches in order, each with its sort key, and whether more were offered.
    pub fn finish(self) -> (Vec<(Vec<u8>, T)>, bool) {
        let more = self.offered > self.kept.len() as u64;
        let sorted = self.kept.into_sorted_vec();
        let page = sorted
            .into_iter()
            .map(|kept| (kept.sort_key, kept.item))
            .collect();
        (page, more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Value;

    fn order(terms: &[(&str, bool)]) -> OrderBy {
        let terms = terms
            .iter()
            .map(|(path, descending)| OrderTerm {
                path: (*path).into(),
                descending: *descending,
            })
            .collect();
        OrderBy::new(terms).unwrap()
    }

    fn key_of(order: &OrderBy, rk: &str, value: Option<Value>) -> Vec<u8> {
        order.sort_key("p", rk, Ticks(0), |name| {
            (name == "V")
                .then_some(value.as_ref())
                .flatten()
                .map(Value::borrowed)
        })
    }

    #[test]
    fn values_order_as_indexes_order_them_missing_first_and_ties_by_keys() {
        let up = order(&[("V", false)]);
        let keys = [
            key_of(&up, "a", None),
            key_of(&up, "b", Some(Value::Int32(-5))),
            key_of(&up, "a", Some(Value::Int32(7))),
            key_of(&up, "b", Some(Value::Int32(7))),
            key_of(&up, "c", Some(Value::Int64(-9))),
            key_of(&up, "d", Some(Value::String("a".into()))),
            key_of(&up, "e", Some(Value::String("ab".into()))),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "ascending");
        let down = order(&[("V", true)]);
        let (small, big, none) = (
            key_of(&down, "x", Some(Value::String("a".into()))),
            key_of(&down, "x", Some(Value::String("ab".into()))),
            key_of(&down, "x", None),
        );
        assert!(big < small && small < none, "descending, missing last");
    }

    #[test]
    fn top_k_keeps_the_best_within_its_limit_and_bytes_and_resumes_after_a_key() {
        let mut top = TopK::new(None, 3, 1_000);
        for n in [5u8, 1, 9, 3, 7, 2] {
            top.offer(vec![n], 10, || n);
        }
        let (page, more) = top.finish();
        assert_eq!(page.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(more);
        let mut next = TopK::new(Some(vec![3]), 3, 25);
        for n in [5u8, 1, 9, 3, 7, 2] {
            next.offer(vec![n], 10, || n);
        }
        assert_eq!(next.offered(), 3);
        let (page, more) = next.finish();
        assert_eq!(
            page.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
            [5, 7],
            "bytes"
        );
        assert!(more);
        let mut huge = TopK::new(None, 3, 5);
        huge.offer(vec![1], 100, || 1);
        assert_eq!(huge.finish().0.len(), 1, "one match always fits");
    }

    #[test]
    fn odata_orderby_reads_paths_with_their_directions() {
        let order = OrderBy::parse_odata("Age desc, Address/City,RowKey asc").unwrap();
        let read: Vec<_> = order
            .terms()
            .iter()
            .map(|t| (t.path.as_str(), t.descending))
            .collect();
        assert_eq!(
            read,
            [("Age", true), ("Address/City", false), ("RowKey", false)]
        );
        for bad in ["", "Age down", "Age desc x", "Age,,Name", "A,B,C,D,E"] {
            assert!(OrderBy::parse_odata(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn too_many_terms_and_bad_paths_are_refused() {
        let term = |path: &str| OrderTerm {
            path: path.into(),
            descending: false,
        };
        assert!(OrderBy::new(vec![term("A"); 5]).is_err());
        assert!(OrderBy::new(vec![term("A/")]).is_err());
        assert!(OrderBy::new(vec![term("")]).is_err());
        assert!(OrderBy::new(vec![term("RowKey"), term("Variants/0/Stock")]).is_ok());
    }
}
