//! Queries: a typed [`Filter`] builder that escapes its values, and [`Query`], which reads pages,
//! streams entities across continuation tokens, or counts.

use std::marker::PhantomData;

use futures_core::Stream;
use futures_util::{stream, TryStreamExt};
use serde::de::DeserializeOwned;
use trestle_proto::pb;

use crate::client::Client;
use crate::convert::typed;
use crate::entity::Entity;
use crate::error::{Error, ErrorKind, Result};
use crate::mapping::probe::{numeric_fields, NumericType};
use crate::value::Value;

/// A filter in Azure's `$filter` language, built from typed comparisons whose values are escaped
/// and written with their type (`42`, `42L`, `4.2`, `datetime'…'`, `guid'…'`, `X'…'`).
///
/// ```
/// use trestle_client::Filter;
/// let filter = Filter::eq("LastName", "O'Brien").and(Filter::ge("Age", 30));
/// assert_eq!(filter.as_str(), "(LastName eq 'O''Brien') and (Age ge 30)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter(String);

macro_rules! comparisons {
    ($($name:ident => $op:literal, $doc:literal;)*) => {
        $(#[doc = $doc]
        pub fn $name(property: &str, value: impl Into<Value>) -> Filter {
            Filter(format!(concat!("{} ", $op, " {}"), property, literal(&value.into())))
        })*
    };
}

impl Filter {
    comparisons! {
        eq => "eq", "`property eq value`.";
        ne => "ne", "`property ne value`.";
        gt => "gt", "`property gt value`.";
        ge => "ge", "`property ge value`.";
        lt => "lt", "`property lt value`.";
        le => "le", "`property le value`.";
    }

    /// Both filters hold.
    pub fn and(self, other: Filter) -> Filter {
        Filter(format!("({}) and ({})", self.0, other.0))
    }

    /// Either filter holds.
    pub fn or(self, other: Filter) -> Filter {
        Filter(format!("({}) or ({})", self.0, other.0))
    }

    /// The filter does not hold.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Filter {
        Filter(format!("not ({})", self.0))
    }

    /// A comparison on field `name` of the struct `T` whose literal takes the EDM type the serde
    /// mapping stores that field as: an `i64` field compares with `10L`, an `i32` one with `10`,
    /// an `f64` one with `10.0`, whatever integer type the value is written with. (On Azure, and
    /// here, a literal of another type than the stored property's matches nothing for `eq`:
    /// `Filter::ge("likes", 10i64)` against an Int32 property is `likes ge 10L`, which no entity
    /// matches.) `name` is the serialized name (after `#[serde(rename)]`).
    ///
    /// ```
    /// use trestle_client::Filter;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Post { title: String, likes: i64, rank: i32 }
    ///
    /// assert_eq!(Filter::field::<Post>("likes").ge(10).as_str(), "likes ge 10L");
    /// assert_eq!(Filter::field::<Post>("rank").lt(3u8).as_str(), "rank lt 3");
    /// assert_eq!(Filter::field::<Post>("title").eq("Hi").as_str(), "title eq 'Hi'");
    /// ```
    pub fn field<T: DeserializeOwned>(name: &str) -> FieldFilter {
        FieldFilter {
            numeric: numeric_fields::<T>().get(name).copied(),
            name: name.to_owned(),
        }
    }

    /// Comparisons on a path into a document (`Address/City`, members separated by `/`), or on a
    /// lambda's variable or a member of it (`h`, `h/Symbol`); and `any`/`all` over an array.
    ///
    /// ```
    /// use trestle_client::Filter;
    /// assert_eq!(Filter::path("Address/City").eq("Seattle").as_str(), "Address/City eq 'Seattle'");
    /// let big = Filter::path("h/Symbol").eq("zaza").and(Filter::path("h/NumberHeld").gt(50i64));
    /// assert_eq!(
    ///     Filter::path("Holdings").any("h", big).as_str(),
    ///     "Holdings/any(h: (h/Symbol eq 'zaza') and (h/NumberHeld gt 50L))"
    /// );
    /// assert_eq!(Filter::path("Books").any("b", Filter::path("b").eq("b1")).as_str(), "Books/any(b: b eq 'b1')");
    /// assert_eq!(Filter::path("Books").not_empty().as_str(), "Books/any()");
    /// ```
    pub fn path(path: &str) -> FieldFilter {
        FieldFilter {
            numeric: None,
            name: path.to_owned(),
        }
    }

    /// A filter written by hand, passed as is (the escape hatch: quote values yourself).
    pub fn raw(text: impl Into<String>) -> Filter {
        Filter(text.into())
    }

    /// The filter's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Comparisons on one field of a struct, with literals of the field's EDM type
/// ([`Filter::field`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct FieldFilter {
    name: String,
    numeric: Option<NumericType>,
}

macro_rules! field_comparisons {
    ($($name:ident => $op:literal, $doc:literal;)*) => {
        $(#[doc = $doc]
        pub fn $name(&self, value: impl Into<Value>) -> Filter {
            let value = as_field_type(value.into(), self.numeric);
            Filter(format!(concat!("{} ", $op, " {}"), self.name, literal(&value)))
        })*
    };
}

impl FieldFilter {
    field_comparisons! {
        eq => "eq", "`field eq value`, the value of the field's type.";
        ne => "ne", "`field ne value`, the value of the field's type.";
        gt => "gt", "`field gt value`, the value of the field's type.";
        ge => "ge", "`field ge value`, the value of the field's type.";
        lt => "lt", "`field lt value`, the value of the field's type.";
        le => "le", "`field le value`, the value of the field's type.";
    }

    /// Some element of the array holds `condition`, which names the element `variable`.
    pub fn any(&self, variable: &str, condition: Filter) -> Filter {
        Filter(format!("{}/any({variable}: {})", self.name, condition.0))
    }

    /// Every element of the array holds `condition` (true of an empty array; false when the
    /// property is no array).
    pub fn all(&self, variable: &str, condition: Filter) -> Filter {
        Filter(format!("{}/all({variable}: {})", self.name, condition.0))
    }

    /// The array has an element.
    pub fn not_empty(&self) -> Filter {
        Filter(format!("{}/any()", self.name))
    }
}

/// `value` as a literal of a field of type `numeric`, where the number fits.
fn as_field_type(value: Value, numeric: Option<NumericType>) -> Value {
    match (numeric, value) {
        (Some(NumericType::Int64), Value::Int32(v)) => Value::Int64(v.into()),
        (Some(NumericType::Int32), Value::Int64(v)) if i32::try_from(v).is_ok() => {
            Value::Int32(v as i32)
        }
        (Some(NumericType::Double), Value::Int32(v)) => Value::Double(v.into()),
        (Some(NumericType::Double), Value::Int64(v)) => Value::Double(v as f64),
        (_, value) => value,
    }
}

/// A value as a filter literal. A document has none: its text is refused by the server's parser
/// (compare its members by path instead).
fn literal(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        Value::Int32(v) => v.to_string(),
        Value::Int64(v) => format!("{v}L"),
        Value::Double(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.1}"),
        Value::Double(v) => format!("{v:e}"),
        Value::Bool(v) => v.to_string(),
        Value::DateTime(t) => format!("datetime'{}'", trestle_proto::datetime::format(t.ticks())),
        Value::Guid(g) => format!("guid'{}'", g.hyphenated()),
        Value::Binary(b) => format!(
            "X'{}'",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
        Value::Null => "null".to_owned(),
        Value::Object(_) | Value::Array(_) => "{document}".to_owned(),
    }
}

/// A stream of query results (pinned and boxed, so it can be polled directly).
pub type EntityStream<I> = std::pin::Pin<Box<dyn Stream<Item = Result<I>> + Send>>;

/// The messages of the server stream `opening` opens, in order; an error (opening it, or midway)
/// ends it.
pub(crate) fn server_messages<M: Send + 'static>(
    opening: impl std::future::Future<Output = Result<tonic::Streaming<M>>> + Send + 'static,
) -> impl Stream<Item = Result<M>> + Send {
    stream::once(opening)
        .map_ok(|responses| {
            stream::try_unfold(responses, |mut responses| async move {
                let message = responses.message().await.map_err(Error::from_status)?;
                Ok::<_, Error>(message.map(|message| (message, responses)))
            })
        })
        .try_flatten()
}

/// One page of a query.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The entities of the page, in key order (descending for a reverse query).
    pub items: Vec<Entity<T>>,
    /// The token that resumes the query after this page ([`Query::continue_from`]); `None` when
    /// the query is complete.
    pub continuation: Option<String>,
    /// How the server read the page.
    pub stats: QueryStats,
    /// With [`Query::skip_undecodable`], the entities of the page that did not decode as `T`
    /// (each error names the entity's keys); otherwise always empty.
    pub undecodable: Vec<crate::Error>,
}

/// How the server read a page: its plan and the work it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// The kind of plan: `point`, `partition`, `partition_union`, `partition_range`,
    /// `table_scan`, `empty`, or `index:<name>`.
    pub plan: String,
    /// Entities the server read to fill the page, matching or not.
    pub entities_examined: u64,
}

/// A query over one table, reading entities as `T`. Build it, then call [`Query::stream`],
/// [`Query::pages`], [`Query::page`], [`Query::all`] or [`Query::count`].
#[derive(Debug)]
#[must_use]
pub struct Query<T> {
    client: Client,
    request: pb::QueryEntitiesRequest,
    skip_undecodable: bool,
    _entity: PhantomData<fn() -> T>,
}

impl<T> Clone for Query<T> {
    fn clone(&self) -> Self {
        Query {
            client: self.client.clone(),
            request: self.request.clone(),
            skip_undecodable: self.skip_undecodable,
            _entity: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Query<T> {
    pub(crate) fn new(client: Client, table: String) -> Query<T> {
        let request = pb::QueryEntitiesRequest {
            table,
            ..Default::default()
        };
        Query {
            client,
            request,
            skip_undecodable: false,
            _entity: PhantomData,
        }
    }

    /// Only this partition.
    pub fn partition(mut self, partition_key: impl Into<String>) -> Self {
        self.request.partition_key = Some(partition_key.into());
        self
    }

    /// Row keys in `[start, end)` (an empty bound is open); needs [`Query::partition`].
    pub fn row_key_range(mut self, start: impl Into<String>, end: impl Into<String>) -> Self {
        self.request.row_key_start = start.into();
        self.request.row_key_end = end.into();
        self
    }

    /// Row keys starting with `prefix`; needs [`Query::partition`].
    pub fn row_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.request.row_key_prefix = prefix.into();
        self
    }

    /// Reads through the declared index `name`: results in the index's order (then
    /// PartitionKey, RowKey). The filter's `eq` terms on the index's leading properties and
    /// bounds on the next one choose the range read (of the literal's type: use an `i64` value
    /// for an Int64 property); the rest of the filter applies to what it yields. Not with the
    /// row-key range or prefix.
    ///
    /// ```
    /// # async fn example(people: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// # #[derive(serde::Deserialize)] struct Person { #[serde(rename = "Email")] email: String }
    /// use trestle_client::Filter;
    /// let ada = people
    ///     .query::<Person>()
    ///     .index("ByEmail")
    ///     .filter(Filter::eq("Email", "ada@example.com"))
    ///     .all()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn index(mut self, name: impl Into<String>) -> Self {
        self.request.index = name.into();
        self
    }

    /// Descending key order: newest first for log-tail keys.
    pub fn reverse(mut self) -> Self {
        self.request.reverse = true;
        self
    }

    /// Only entities matching `filter`.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.request.filter = filter.0;
        self
    }

    /// Only these properties are read (keys, ETag and timestamp always are).
    pub fn select<S: Into<String>>(mut self, properties: impl IntoIterator<Item = S>) -> Self {
        self.request.select = properties.into_iter().map(Into::into).collect();
        self
    }

    /// At most this many entities per page (1..=1000; the server's maximum by default).
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.request.page_size = page_size;
        self
    }

    /// Sorts the matches by `path` ascending (then by the terms added after it; at most 4):
    /// a property, `PartitionKey`, `RowKey`, `Timestamp`, or a path into a document
    /// (`Address/City`, `Variants/0/Stock`), in the EDM type order indexes use, entities lacking
    /// the value first; ties by the keys. Each page reads every match (the server refuses past
    /// 1,000,000 matches, naming the index to declare); [`Query::stream`] and [`Query::pages`]
    /// follow the pages, [`Query::scan`] does not sort.
    pub fn order_by(mut self, path: impl Into<String>) -> Self {
        self.request.order_by.push(pb::OrderTerm {
            path: path.into(),
            descending: false,
        });
        self
    }

    /// Sorts the matches by `path` descending (greatest first, entities lacking the value
    /// last), as [`Query::order_by`] does.
    pub fn order_by_desc(mut self, path: impl Into<String>) -> Self {
        self.request.order_by.push(pb::OrderTerm {
            path: path.into(),
            descending: true,
        });
        self
    }

    /// Only segment `segment` (from 0) of `total` (1..=1024): the table's partitions split by a
    /// fixed hash of their PartitionKey, disjoint, together exactly the query's answer, each in
    /// the query's order, a partition never split. Give each worker one:
    /// [`Query::scan_parallel`] does.
    pub fn segment(mut self, segment: u32, total: u32) -> Self {
        self.request.segment = segment;
        self.request.total_segments = total;
        self
    }

    /// The query split into `total` segments ([`Query::segment`]), each read over a server
    /// stream of its own ([`Query::scan`]): read them concurrently for a whole-table export or
    /// batch job. Together they yield every matching entity once.
    ///
    /// ```
    /// # async fn example(logs: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// use futures_util::TryStreamExt;
    /// let segments = logs.query::<trestle_client::Properties>().scan_parallel(4);
    /// let counts = futures_util::future::try_join_all(
    ///     segments.into_iter().map(|segment| segment.try_fold(0u64, |n, _| async move { Ok(n + 1) })),
    /// )
    /// .await?;
    /// println!("{} entities", counts.iter().sum::<u64>());
    /// # Ok(()) }
    /// ```
    pub fn scan_parallel(self, total: u32) -> Vec<EntityStream<Entity<T>>>
    where
        T: Send + 'static,
    {
        (0..total)
            .map(|segment| self.clone().segment(segment, total).scan())
            .collect()
    }

    /// Resumes a query where an earlier page's continuation left off.
    pub fn continue_from(mut self, continuation: impl Into<String>) -> Self {
        self.request.continuation_token = continuation.into();
        self
    }

    /// Entities that do not decode as `T` are left out of the results rather than failing the
    /// query: each page lists them in [`Page::undecodable`]. For a partition holding several row
    /// types read as one of them; to read them all, decode into an enum of the types (see the
    /// crate documentation).
    pub fn skip_undecodable(mut self) -> Self {
        self.skip_undecodable = true;
        self
    }

    /// Reads the page the query is at: the first, or the one its continuation
    /// ([`Query::continue_from`]) points to.
    pub async fn page(&self) -> Result<Page<T>> {
        let request = self.request.clone();
        let page = self
            .client
            .read(request, |mut c, r| async move { c.query_entities(r).await })
            .await?;
        let mut items = Vec::with_capacity(page.entities.len());
        let mut undecodable = Vec::new();
        for entity in page.entities {
            match typed(entity) {
                Ok(entity) => items.push(entity),
                Err(error) if self.skip_undecodable && error.kind() == ErrorKind::Mapping => {
                    undecodable.push(error);
                }
                Err(error) => return Err(error),
            }
        }
        let stats = page.stats.unwrap_or_default();
        Ok(Page {
            items,
            continuation: Some(page.continuation_token).filter(|t| !t.is_empty()),
            stats: QueryStats {
                plan: stats.plan,
                entities_examined: stats.entities_examined,
            },
            undecodable,
        })
    }

    /// Reads the page the query is at (renamed [`Query::page`]).
    #[deprecated(note = "renamed `page`: it reads the page the query is at, not always the first")]
    pub async fn first_page(&self) -> Result<Page<T>> {
        self.page().await
    }

    /// Every page, following continuation tokens.
    pub fn pages(self) -> EntityStream<Page<T>>
    where
        T: Send + 'static,
    {
        Box::pin(stream::try_unfold(Some(self), |query| async move {
            let Some(query) = query else { return Ok(None) };
            let page = query.page().await?;
            let next = page
                .continuation
                .clone()
                .map(|token| query.continue_from(token));
            Ok(Some((page, next)))
        }))
    }

    /// Every matching entity, in order, across pages.
    pub fn stream(self) -> EntityStream<Entity<T>>
    where
        T: Send + 'static,
    {
        let pages = self.pages();
        Box::pin(
            pages
                .map_ok(|page| stream::iter(page.items.into_iter().map(Ok)))
                .try_flatten(),
        )
    }

    /// Every matching entity, in order, over one server stream (`ScanEntities`) instead of a
    /// request per page: the server reads ahead of the reader by one batch at most and stops
    /// when the stream is dropped. For reading a whole table or a large range; [`Query::stream`]
    /// resumes page by page and is the one to use where each page may come from another server.
    /// Opening the stream is retried as reads are; an error midway ends it with that error.
    /// With [`Query::skip_undecodable`], entities that do not decode as `T` are left out.
    ///
    /// ```
    /// # async fn example(logs: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// use futures_util::TryStreamExt;
    /// let mut lines = logs.query::<trestle_client::Properties>().scan();
    /// while let Some(line) = lines.try_next().await? {
    ///     println!("{}", line.key.row_key);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn scan(self) -> EntityStream<Entity<T>>
    where
        T: Send + 'static,
    {
        let skip_undecodable = self.skip_undecodable;
        let opening = async move {
            self.client
                .read(
                    self.request,
                    |mut c, r| async move { c.scan_entities(r).await },
                )
                .await
        };
        let batches = server_messages(opening);
        Box::pin(
            batches
                .map_ok(move |batch| {
                    let entities =
                        batch
                            .entities
                            .into_iter()
                            .filter_map(move |entity| match typed(entity) {
                                Err(error)
                                    if skip_undecodable && error.kind() == ErrorKind::Mapping =>
                                {
                                    None
                                }
                                decoded => Some(decoded),
                            });
                    stream::iter(entities)
                })
                .try_flatten(),
        )
    }

    /// Every matching entity, collected.
    pub async fn all(self) -> Result<Vec<Entity<T>>>
    where
        T: Send + 'static,
    {
        self.stream().try_collect().await
    }

    /// Aggregates of the matching entities, computed by the server ([`crate::Aggregate`]).
    pub fn aggregate(self) -> crate::Aggregate {
        crate::Aggregate::new(Query {
            client: self.client,
            request: self.request,
            skip_undecodable: false,
            _entity: PhantomData,
        })
    }

    /// The query's request as built.
    pub(crate) fn request(&self) -> &pb::QueryEntitiesRequest {
        &self.request
    }

    /// The client the query runs on.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The number of matching entities, counted by the server.
    pub async fn count(&self) -> Result<u64> {
        let request = self.request.clone();
        let counted = self
            .client
            .read(request, |mut c, r| async move { c.count_entities(r).await })
            .await?;
        Ok(counted.count)
    }

    /// Whether any entity matches.
    pub async fn exists(&self) -> Result<bool> {
        let mut query = self.clone().page_size(1);
        loop {
            let page = query.page().await?;
            if !page.items.is_empty() {
                return Ok(true);
            }
            match page.continuation {
                Some(token) => query = query.continue_from(token),
                None => return Ok(false),
            }
        }
    }
}
