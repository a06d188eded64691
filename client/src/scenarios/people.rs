//! People, as the Cosmos DB modelling guide embeds them: each person one entity holding their
//! addresses and their contact details (of different shapes) as documents, read and written
//! whole, changed in place by path; "who lives in Seattle" is a lookup in a multi-valued index
//! over every address's city, not a scan and not a joining entity.

use serde::{Deserialize, Serialize};

use super::{expect, wrong};
use crate::{Entity, Filter, IndexDefinition, Patch, Result, TableClient};

/// The partition people are kept in (a real application would spread them by a key of its own).
const PEOPLE: &str = "people";
/// The index over every address's city.
const BY_CITY: &str = "ByCity";

/// A person with embedded addresses and contact details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Person {
    /// Their name.
    pub name: String,
    /// Where they live or work.
    pub addresses: Vec<Address>,
    /// How to reach them: each detail of its own shape.
    pub contact_details: Vec<ContactDetail>,
}

/// An address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Address {
    /// The street and number.
    pub line: String,
    /// The city.
    pub city: String,
    /// The postal code.
    pub zip: String,
}

/// One way to reach a person: an email, or a phone with an optional extension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContactDetail {
    /// An email address.
    Email {
        /// The address.
        #[serde(rename = "Email")]
        email: String,
    },
    /// A phone number.
    Phone {
        /// The number.
        #[serde(rename = "Phone")]
        phone: String,
        /// An extension, if any.
        #[serde(rename = "Extension", default, skip_serializing_if = "Option::is_none")]
        extension: Option<i32>,
    },
}

/// People over one table.
#[derive(Debug, Clone)]
pub struct People {
    table: TableClient,
}

impl People {
    /// People in `table`.
    pub fn new(table: TableClient) -> People {
        People { table }
    }

    /// Creates the table with its index over every address's city (`Addresses/*/City`).
    pub async fn setup(&self) -> Result<()> {
        let by_city = IndexDefinition::table(BY_CITY, ["Addresses/*/City"]);
        self.table.create_with_indexes([by_city]).await
    }

    /// Adds a person.
    pub async fn add(&self, id: &str, person: &Person) -> Result<()> {
        self.table.insert((PEOPLE, id), person).await?;
        Ok(())
    }

    /// A person, whole.
    pub async fn get(&self, id: &str) -> Result<Entity<Person>> {
        self.table.get((PEOPLE, id)).await
    }

    /// The people with an address in `city`: one index lookup, each person once.
    pub async fn in_city(&self, city: &str) -> Result<Vec<Entity<Person>>> {
        let lives_there = Filter::path("Addresses").any("a", Filter::path("a/City").eq(city));
        self.table
            .query::<Person>()
            .index(BY_CITY)
            .filter(lives_there)
            .all()
            .await
    }

    /// Moves a person's address number `at` to another city: one value changed by its path,
    /// without reading or rewriting the rest of the person.
    pub async fn move_address(&self, id: &str, at: usize, address: &Address) -> Result<()> {
        let patch = Patch::new()
            .set(format!("Addresses/{at}/Line"), address.line.as_str())
            .set(format!("Addresses/{at}/City"), address.city.as_str())
            .set(format!("Addresses/{at}/Zip"), address.zip.as_str());
        self.table.patch::<Person>((PEOPLE, id), &patch).await?;
        Ok(())
    }

    /// Adds a way to reach a person (once: an equal detail is not added again).
    pub async fn add_contact(&self, id: &str, detail: &ContactDetail) -> Result<()> {
        let detail = crate::to_value(detail)
            .map_err(|error| crate::Error::new(crate::ErrorKind::Mapping, error.to_string()))?;
        let patch = Patch::new().add_to_set("ContactDetails", detail);
        self.table.patch::<Person>((PEOPLE, id), &patch).await?;
        Ok(())
    }
}

fn address(line: &str, city: &str, zip: &str) -> Address {
    Address {
        line: line.into(),
        city: city.into(),
        zip: zip.into(),
    }
}

/// The scenario's three people, by id: addresses and contact details of different shapes.
fn everyone() -> [(&'static str, Person); 3] {
    let email = |email: &str| ContactDetail::Email {
        email: email.into(),
    };
    let phone = |phone: &str, extension| ContactDetail::Phone {
        phone: phone.into(),
        extension,
    };
    let pike_st = address("1 Pike St", "Seattle", "98101");
    let marylebone_rd = address("12 Marylebone Rd", "London", "NW1");
    let navy_way = address("3 Navy Way", "Arlington", "22202");
    let bletchley_park = address("9 Bletchley Park", "Milton Keynes", "MK3");
    let pine_st = address("2 Pine St", "Seattle", "98101");
    let ada = Person {
        name: "Ada".into(),
        addresses: vec![pike_st, marylebone_rd],
        contact_details: vec![email("ada@example.com"), phone("+1 206 555 0100", Some(12))],
    };
    let grace = Person {
        name: "Grace".into(),
        addresses: vec![navy_way],
        contact_details: vec![phone("+1 703 555 0199", None)],
    };
    let alan = Person {
        name: "Alan".into(),
        addresses: vec![bletchley_park, pine_st],
        contact_details: vec![email("alan@example.com")],
    };
    [("ada", ada), ("grace", grace), ("alan", alan)]
}

/// The whole scenario on `people`, as the `people` example runs it: three people with addresses
/// and contact details of different shapes, who lives in Seattle, one of them moving there, a
/// contact detail added twice. Checks each answer; returns what it did, a line per step.
///
/// # Errors
/// A request's error, or `Internal` if an answer is wrong.
pub async fn tour(people: &People) -> Result<Vec<String>> {
    let mut report = Vec::new();
    people.setup().await?;
    let everyone = everyone();
    for (id, person) in &everyone {
        people.add(id, person).await?;
    }
    report.push(format!(
        "added {} people with embedded addresses and contact details",
        everyone.len()
    ));

    let names = |found: Vec<Entity<Person>>| -> Vec<String> {
        found.into_iter().map(|p| p.value.name).collect()
    };
    let seattle = names(people.in_city("Seattle").await?);
    expect(&seattle, &["Ada", "Alan"], "people in Seattle")?;
    report.push(format!("people in Seattle, by index: {seattle:?}"));

    people
        .move_address("grace", 0, &address("5 Spring St", "Seattle", "98104"))
        .await?;
    let seattle = names(people.in_city("Seattle").await?);
    expect(
        &seattle,
        &["Ada", "Alan", "Grace"],
        "people in Seattle after a move",
    )?;
    let arlington = names(people.in_city("Arlington").await?);
    expect(&arlington, &[], "people in Arlington after the move")?;
    report.push(format!(
        "Grace moved by a patch at Addresses/0: Seattle has {seattle:?}"
    ));

    let detail = ContactDetail::Email {
        email: "grace@example.com".into(),
    };
    people.add_contact("grace", &detail).await?;
    people.add_contact("grace", &detail).await?;
    let grace = people.get("grace").await?.value;
    if grace.contact_details.len() != 2 {
        return Err(wrong(format!(
            "Grace has {} contact details, expected 2",
            grace.contact_details.len()
        )));
    }
    report.push(format!(
        "Grace's contact details, an email added twice but kept once: {:?}",
        grace.contact_details
    ));
    Ok(report)
}
