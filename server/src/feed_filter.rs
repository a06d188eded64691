//! Filtered change feeds (`ReadChanges`' `filter`): a record is shown when the query language's
//! filter matches the entity as the change left it or, where the feed keeps before images, as it
//! was before, and the record says which ([`Matched`]). A delete or an expiry leaves no entity,
//! so a filtered feed shows one only through its before image. The reader's cursor moves past
//! every record, shown or not.
//!
//! Bounded by: the filter's worst case on one entity charged to the request's work budget when it
//! is parsed (`query::filter::cost`), evaluated at most twice a record on records read a batch at
//! a time within the stream framing's bounds (`grpc::changes`), each property it names decoded
//! alone from the stored bytes ([`crate::scan::entity_matches`]). In the system checker's
//! workload: `server/tests/checker/feed.rs` reads each list table's feed filtered too, and checks
//! it against the unfiltered read.

use crate::model::{Spend, ValidationError};
use crate::query::{parse_filter, Expr};
use crate::scan::entity_matches;
use crate::storage::{StorageError, StoredChange};

/// Which image of the entity a filtered feed's record matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Matched {
    /// The entity as the change left it.
    After,
    /// The entity before the change.
    Before,
    /// Both.
    Both,
}

/// A feed's filter, parsed and charged.
#[derive(Debug, Clone)]
pub(crate) struct FeedFilter {
    expr: Expr,
}

impl FeedFilter {
    /// The filter `text` (empty: none), its work charged to the request's `spend`.
    pub(crate) fn parse(
        text: &str,
        spend: &mut Spend,
    ) -> Result<Option<FeedFilter>, ValidationError> {
        if text.is_empty() {
            return Ok(None);
        }
        let expr = parse_filter(text, spend)?;
        Ok(Some(FeedFilter { expr }))
    }

    /// Which of `change`'s images the filter matches; `None` if neither does.
    pub(crate) fn matched(&self, change: &StoredChange) -> Result<Option<Matched>, StorageError> {
        let matches = |image: Option<crate::storage::EntityView<'_>>| match image {
            Some(entity) => entity_matches(&self.expr, &entity),
            None => Ok(false),
        };
        let after = matches(change.after()?)?;
        let before = matches(change.before()?)?;
        Ok(match (after, before) {
            (true, true) => Some(Matched::Both),
            (true, false) => Some(Matched::After),
            (false, true) => Some(Matched::Before),
            (false, false) => None,
        })
    }
}
