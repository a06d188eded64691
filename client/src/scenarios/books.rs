//! Authors and books, as the Cosmos DB modelling guide links them: no joining entity, but arrays
//! of ids on both sides, and a hybrid of both models: each book embeds short summaries of its
//! authors, each author keeps the ids of their books and a pre-calculated `CountOfBooks`.
//! "Books of a1" and "authors of b1" are both lookups in multi-valued indexes; publishing a book
//! writes the book and every author's list and count in one transaction across partitions.

use serde::{Deserialize, Serialize};

use super::{expect, wrong};
use crate::{Entity, Filter, IndexDefinition, Patch, Result, TableClient};

/// The partition of authors and the partition of books.
const AUTHORS: &str = "authors";
const BOOKS: &str = "books";
/// The index of authors by each of their books, and of books by each of their authors.
const BY_BOOK: &str = "ByBook";
const BY_AUTHOR: &str = "ByAuthor";

/// An author: the ids of their books, and how many there are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Author {
    /// Their name.
    pub name: String,
    /// The ids of their books.
    #[serde(default)]
    pub books: Vec<String>,
    /// How many books they have, kept with `books`.
    #[serde(default)]
    pub count_of_books: i64,
}

/// A book, with a short summary of each of its authors embedded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Book {
    /// The title.
    pub title: String,
    /// Who wrote it: enough to show the book without reading the authors.
    pub authors: Vec<AuthorSummary>,
}

/// What a book shows of an author.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AuthorSummary {
    /// The author's id.
    pub id: String,
    /// The author's name.
    pub name: String,
}

/// Authors and books in one table.
#[derive(Debug, Clone)]
pub struct Library {
    table: TableClient,
}

impl Library {
    /// The library in `table`.
    pub fn new(table: TableClient) -> Library {
        Library { table }
    }

    /// Creates the table with both indexes: authors by each book id (`Books/*`), books by each
    /// author's id (`Authors/*/Id`).
    pub async fn setup(&self) -> Result<()> {
        self.table
            .create_with_indexes([
                IndexDefinition::table(BY_BOOK, ["Books/*"]),
                IndexDefinition::table(BY_AUTHOR, ["Authors/*/Id"]),
            ])
            .await
    }

    /// Adds an author with no books.
    pub async fn add_author(&self, id: &str, name: &str) -> Result<()> {
        let author = Author {
            name: name.into(),
            books: Vec::new(),
            count_of_books: 0,
        };
        self.table.insert((AUTHORS, id), &author).await?;
        Ok(())
    }

    /// An author.
    pub async fn author(&self, id: &str) -> Result<Entity<Author>> {
        self.table.get((AUTHORS, id)).await
    }

    /// Publishes a book by `authors`: reads their names at one instant, then in one transaction
    /// across partitions inserts the book with their summaries and, for each author, adds the
    /// book's id to `Books` and one to `CountOfBooks` (patches: no conflict with other books
    /// published at once). All or nothing.
    pub async fn publish(&self, id: &str, title: &str, authors: &[&str]) -> Result<()> {
        let table = self.table.name();
        let snapshot = self
            .table
            .client
            .get_many(authors.iter().map(|author| (table, (AUTHORS, *author))))
            .await?;
        let mut summaries = Vec::with_capacity(authors.len());
        for (at, author) in authors.iter().enumerate() {
            let found = snapshot.get::<Author>(at)?.ok_or_else(|| {
                crate::Error::new(
                    crate::ErrorKind::NotFound,
                    format!("author {author} does not exist"),
                )
            })?;
            summaries.push(AuthorSummary {
                id: (*author).to_owned(),
                name: found.value.name,
            });
        }
        let book = Book {
            title: title.into(),
            authors: summaries,
        };
        let mut tx = self.table.client.transaction();
        tx.insert(table, (BOOKS, id), &book)?;
        let credit = Patch::new()
            .add_to_set("Books", id)
            .increment("CountOfBooks", 1i64);
        for author in authors {
            tx.patch(table, (AUTHORS, *author), &credit)?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The books `author` wrote: one index lookup.
    pub async fn books_of(&self, author: &str) -> Result<Vec<Entity<Book>>> {
        let wrote = Filter::path("Authors").any("a", Filter::path("a/Id").eq(author));
        let query = self.table.query::<Book>().index(BY_AUTHOR).filter(wrote);
        query.all().await
    }

    /// The authors of `book`: one index lookup.
    pub async fn authors_of(&self, book: &str) -> Result<Vec<Entity<Author>>> {
        let wrote = Filter::path("Books").any("b", Filter::path("b").eq(book));
        let query = self.table.query::<Author>().index(BY_BOOK).filter(wrote);
        query.all().await
    }
}

/// The whole scenario on `library`, as the `books` example runs it: three authors, three books
/// (one with two authors, one naming an author who does not exist, refused with nothing
/// written), the books of an author and the authors of a book, and each author's count. Checks
/// each answer; returns what it did, a line per step.
///
/// # Errors
/// A request's error, or `Internal` if an answer is wrong.
pub async fn tour(library: &Library) -> Result<Vec<String>> {
    let mut report = Vec::new();
    library.setup().await?;
    for (id, name) in [("a1", "Ada"), ("a2", "Grace"), ("a3", "Alan")] {
        library.add_author(id, name).await?;
    }
    library.publish("b1", "Notes", &["a1"]).await?;
    library.publish("b2", "Compilers", &["a1", "a2"]).await?;
    library.publish("b3", "Computable numbers", &["a3"]).await?;
    let refused = library.publish("b4", "Ghost", &["a1", "a9"]).await;
    if !refused.as_ref().is_err_and(|error| error.is_not_found()) {
        return Err(wrong(format!("a book by a missing author: {refused:?}")));
    }
    report.push("published 3 books; a 4th naming a missing author was refused".to_owned());

    let titles: Vec<String> = library
        .books_of("a1")
        .await?
        .into_iter()
        .map(|book| book.value.title)
        .collect();
    expect(&titles, &["Notes", "Compilers"], "books of a1")?;
    report.push(format!("books of a1, by index: {titles:?}"));
    let names: Vec<String> = library
        .authors_of("b2")
        .await?
        .into_iter()
        .map(|author| author.value.name)
        .collect();
    expect(&names, &["Ada", "Grace"], "authors of b2")?;
    report.push(format!("authors of b2, by index: {names:?}"));

    let ada = library.author("a1").await?.value;
    if ada.count_of_books != 2 || ada.books != ["b1", "b2"] {
        return Err(wrong(format!("a1 after publishing: {ada:?}")));
    }
    report.push(format!(
        "a1 keeps CountOfBooks {} and Books {:?}, written with each book",
        ada.count_of_books, ada.books
    ));
    Ok(report)
}
