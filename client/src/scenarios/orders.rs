//! A marketplace: sellers' items with their stock, buyers' carts that expire when abandoned,
//! checkouts that sell each line exactly as far as the stock goes, and sellers' sales totals kept
//! by a change-feed processor group, each order counted exactly once.
//!
//! Tables (all named after one prefix):
//! - `Items`: a seller's partition, one entity per item (`Name`, `Price` in cents, `Stock`), with
//!   a local index by price (a seller's cheapest items first).
//! - `Carts`: a buyer's partition, one line per item (`<seller>|<item>`), expiring
//!   [`Marketplace::cart_seconds`] after its last change (the table's time to live).
//! - `Orders`: a seller's partition, one entity per order line, with a change feed.
//! - `Buyers`: a buyer's 10 most recent orders (an append that keeps the last 10).
//! - `Totals`: a seller's sales and order count, written only by the `totals` group.
//!
//! A checkout is one transaction across partitions: for each line, the item's `Stock` decreased
//! on the condition that it covers the quantity, the order inserted in the seller's partition
//! and the cart line deleted; then the order ids appended to the buyer's recent orders. Either
//! every line is sold or none is (an item short of stock refuses the whole checkout, naming it).
//! At most [`MAX_LINES`] lines, so that it fits one transaction.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::wrong;
use crate::{
    ChangeBatch, Client, CrossTransaction, FeedProcessor, FeedSettings, Filter, IfMatch,
    IndexDefinition, Patch, Result, TableClient, TableSettings, UpsertMode,
};

/// Most lines of a cart at checkout: three operations each and the buyer's append fit one
/// 100-operation transaction.
pub const MAX_LINES: usize = 33;

/// An item for sale, keyed by seller and item id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Item {
    /// What it is.
    pub name: String,
    /// Its price, in cents.
    pub price: i64,
    /// How many are left.
    pub stock: i64,
}

/// A line of a buyer's cart: an item, how many, and its price when added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CartLine {
    /// The seller.
    pub seller: String,
    /// The seller's item.
    pub item: String,
    /// How many.
    pub quantity: i64,
    /// The price of one, in cents, when it was added.
    pub price: i64,
}

/// One line of an order, in its seller's partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Order {
    /// Who bought it.
    pub buyer: String,
    /// The seller's item.
    pub item: String,
    /// How many.
    pub quantity: i64,
    /// What the buyer paid for the line, in cents.
    pub amount: i64,
}

/// A seller's totals, as the `totals` group keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Totals {
    /// The sum of the seller's orders' amounts, in cents.
    #[serde(default)]
    pub sales: i64,
    /// How many order lines.
    #[serde(default)]
    pub orders: i64,
}

/// What a checkout did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkout {
    /// Every line sold: the orders' keys (seller, order id), in the cart's order.
    Ordered(Vec<(String, String)>),
    /// Nothing sold: this item (seller, item) has too few left (or is gone).
    OutOfStock(String, String),
    /// The cart is empty (or expired).
    EmptyCart,
}

/// The marketplace's tables on one server.
#[derive(Debug, Clone)]
pub struct Marketplace {
    client: Client,
    prefix: String,
    cart_seconds: u64,
}

/// The row key of a cart line.
fn line_key(seller: &str, item: &str) -> String {
    format!("{seller}|{item}")
}

impl Marketplace {
    /// The marketplace whose tables' names begin with `prefix`; carts expire an hour after
    /// their last change unless [`Marketplace::cart_seconds`] says otherwise.
    pub fn new(client: Client, prefix: impl Into<String>) -> Marketplace {
        Marketplace {
            client,
            prefix: prefix.into(),
            cart_seconds: 3600,
        }
    }

    /// Carts expire this many seconds after their last change (set before [`Marketplace::setup`]).
    pub fn cart_seconds(mut self, seconds: u64) -> Marketplace {
        self.cart_seconds = seconds;
        self
    }

    fn name(&self, table: &str) -> String {
        format!("{}{table}", self.prefix)
    }

    fn table(&self, table: &str) -> TableClient {
        self.client.table(self.name(table))
    }

    /// Creates the tables, each with its settings in place before its first write.
    pub async fn setup(&self) -> Result<()> {
        let by_price = IndexDefinition::partition("ByPrice", ["Price"]);
        let items = TableSettings::new().index(by_price);
        self.table("Items").create_with(items).await?;
        let carts = TableSettings::new().time_to_live(self.cart_seconds);
        self.table("Carts").create_with(carts).await?;
        let feed = FeedSettings {
            retention_seconds: 7 * 86_400,
            before_images: false,
        };
        let orders = TableSettings::new().change_feed(feed);
        self.table("Orders").create_with(orders).await?;
        self.table("Buyers").create().await?;
        self.table("Totals").create().await
    }

    /// Puts `item` up for sale by `seller` (replacing what it was).
    pub async fn offer(&self, seller: &str, id: &str, item: &Item) -> Result<()> {
        let items = self.table("Items");
        items
            .upsert((seller, id), item, UpsertMode::Replace)
            .await?;
        Ok(())
    }

    /// The item, if offered.
    pub async fn item(&self, seller: &str, id: &str) -> Result<Option<Item>> {
        let item = self
            .table("Items")
            .get_if_exists::<Item>((seller, id))
            .await?;
        Ok(item.map(|item| item.value))
    }

    /// A seller's items of at most `price` cents, cheapest first (the price index).
    pub async fn cheapest(&self, seller: &str, price: i64) -> Result<Vec<(String, Item)>> {
        let items = (self.table("Items").query::<Item>())
            .index("ByPrice")
            .partition(seller)
            .filter(Filter::le("Price", price))
            .all()
            .await?;
        Ok(items
            .into_iter()
            .map(|item| (item.key.row_key, item.value))
            .collect())
    }

    /// Puts `quantity` of a seller's item in `buyer`'s cart at its price now (replacing the
    /// line if there); the cart's expiry starts again.
    ///
    /// # Errors
    /// `is_not_found()` if the item is not offered.
    pub async fn add_to_cart(
        &self,
        buyer: &str,
        seller: &str,
        item: &str,
        quantity: i64,
    ) -> Result<()> {
        let offered = self.table("Items").get::<Item>((seller, item)).await?;
        let line = CartLine {
            seller: seller.to_owned(),
            item: item.to_owned(),
            quantity,
            price: offered.value.price,
        };
        let carts = self.table("Carts");
        carts
            .upsert((buyer, line_key(seller, item)), &line, UpsertMode::Replace)
            .await?;
        Ok(())
    }

    /// The lines of `buyer`'s cart (none once it expired).
    pub async fn cart(&self, buyer: &str) -> Result<Vec<CartLine>> {
        let lines = (self.table("Carts").query::<CartLine>())
            .partition(buyer)
            .all()
            .await?;
        Ok(lines.into_iter().map(|line| line.value).collect())
    }

    /// Sells `buyer`'s cart in one transaction (this module's doc).
    ///
    /// # Errors
    /// `InvalidInput` for a cart of more than [`MAX_LINES`] lines.
    pub async fn checkout(&self, buyer: &str) -> Result<Checkout> {
        let lines = self.cart(buyer).await?;
        if lines.is_empty() {
            return Ok(Checkout::EmptyCart);
        }
        if lines.len() > MAX_LINES {
            return Err(crate::Error::invalid(format!(
                "a checkout sells at most {MAX_LINES} lines, not {}",
                lines.len()
            )));
        }
        let (items, orders, carts) = (self.name("Items"), self.name("Orders"), self.name("Carts"));
        let mut tx = self.client.transaction();
        let mut ordered = Vec::new();
        for line in &lines {
            let sell = Patch::new()
                .increment("Stock", -line.quantity)
                .condition(Filter::ge("Stock", line.quantity));
            tx.patch(&items, (line.seller.as_str(), line.item.as_str()), &sell)?;
            let id = uuid::Uuid::now_v7().to_string();
            let order = Order {
                buyer: buyer.to_owned(),
                item: line.item.clone(),
                quantity: line.quantity,
                amount: line.quantity * line.price,
            };
            tx.insert(&orders, (line.seller.as_str(), id.as_str()), &order)?;
            let line_key = line_key(&line.seller, &line.item);
            tx.delete(&carts, (buyer, line_key.as_str()), IfMatch::Any)?;
            ordered.push((line.seller.clone(), id));
        }
        let mut recent = Patch::new().upsert();
        for (_, id) in &ordered {
            recent = recent.append("Recent", id).keep_last(10);
        }
        tx.patch(&self.name("Buyers"), (buyer, "recent"), &recent)?;
        match tx.commit().await {
            Ok(_) => Ok(Checkout::Ordered(ordered)),
            Err(error) => match error.operation_index() {
                // A stock patch (every third operation) whose condition failed or item is gone.
                Some(index)
                    if index % 3 == 0
                        && index / 3 < lines.len()
                        && (error.is_precondition_failed() || error.is_not_found()) =>
                {
                    let line = &lines[index / 3];
                    Ok(Checkout::OutOfStock(line.seller.clone(), line.item.clone()))
                }
                _ => Err(error),
            },
        }
    }

    /// A seller's order lines.
    pub async fn orders(&self, seller: &str) -> Result<Vec<Order>> {
        let orders = (self.table("Orders").query::<Order>())
            .partition(seller)
            .all()
            .await?;
        Ok(orders.into_iter().map(|order| order.value).collect())
    }

    /// A buyer's most recent order ids, oldest first (at most 10).
    pub async fn recent_orders(&self, buyer: &str) -> Result<Vec<String>> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Stored {
            #[serde(default)]
            recent: Vec<String>,
        }
        let stored = (self.table("Buyers"))
            .get_if_exists::<Stored>((buyer, "recent"))
            .await?;
        Ok(stored.map(|stored| stored.value.recent).unwrap_or_default())
    }

    /// Starts `workers` workers of the `totals` group in this process: each order line's amount
    /// added to its seller's totals in the same transaction as the batch's checkpoint, so each
    /// order counts exactly once through workers stopping, dying and joining (any process may
    /// start more).
    pub fn start_totals(&self, workers: u32) -> Result<FeedProcessor> {
        let totals = self.name("Totals");
        let handler = move |batch: ChangeBatch<Order>, mut tx: CrossTransaction| {
            let totals = totals.clone();
            async move {
                let mut by_seller: BTreeMap<String, Totals> = BTreeMap::new();
                for change in batch.changes {
                    let Some(order) = change.entity else { continue };
                    let seller = by_seller.entry(change.key.partition_key).or_default();
                    seller.sales += order.value.amount;
                    seller.orders += 1;
                }
                for (seller, sold) in by_seller {
                    let add = Patch::new()
                        .increment("Sales", sold.sales)
                        .increment("Orders", sold.orders)
                        .upsert();
                    tx.patch(&totals, (seller.as_str(), "totals"), &add)?;
                }
                Ok(tx)
            }
        };
        FeedProcessor::builder(&self.table("Orders"), "totals")
            .workers(workers)
            .handler(handler)
            .start()
    }

    /// A seller's totals as the `totals` group has counted them so far.
    pub async fn totals(&self, seller: &str) -> Result<Totals> {
        let totals = (self.table("Totals"))
            .get_if_exists::<Totals>((seller, "totals"))
            .await?;
        Ok(totals.map(|totals| totals.value).unwrap_or_default())
    }

    /// Waits (up to `within`) until the `totals` group has counted `orders` of `seller`'s order
    /// lines: the totals then.
    pub async fn totals_once(&self, seller: &str, orders: i64, within: Duration) -> Result<Totals> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let totals = self.totals(seller).await?;
            if totals.orders >= orders || tokio::time::Instant::now() >= deadline {
                return Ok(totals);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The tour: two sellers offer items, three buyers fill carts; two check out (the second of
/// them finds an item short and sells nothing), the third abandons the cart, which expires; the
/// totals group counts what sold. What happened, a line each. `market` must be set up, its carts
/// expiring in at most a few seconds.
pub async fn tour(market: &Marketplace) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let offers = [
        ("ada", "lamp", "Desk lamp", 2_500, 3),
        ("ada", "mug", "Mug", 900, 50),
        ("bo", "pen", "Fountain pen", 4_000, 10),
    ];
    for (seller, id, name, price, stock) in offers {
        let item = Item {
            name: name.into(),
            price,
            stock,
        };
        market.offer(seller, id, &item).await?;
    }
    let cheap = market.cheapest("ada", 1_000).await?;
    lines.push(format!(
        "ada's items of at most $10.00, by the price index: {:?}",
        cheap.iter().map(|(id, _)| id).collect::<Vec<_>>()
    ));
    let totals = market.start_totals(2)?;

    market.add_to_cart("cy", "ada", "lamp", 2).await?;
    market.add_to_cart("cy", "bo", "pen", 1).await?;
    market.add_to_cart("di", "ada", "lamp", 2).await?;
    market.add_to_cart("di", "ada", "mug", 4).await?;
    market.add_to_cart("ed", "ada", "mug", 1).await?;

    let Checkout::Ordered(cy) = market.checkout("cy").await? else {
        return Err(wrong("cy's checkout did not sell".into()));
    };
    lines.push(format!(
        "cy checked out {} lines from two sellers in one transaction",
        cy.len()
    ));
    let di = market.checkout("di").await?;
    if di != Checkout::OutOfStock("ada".into(), "lamp".into()) {
        return Err(wrong(format!("di's checkout: {di:?}")));
    }
    let mugs = market.item("ada", "mug").await?.map(|item| item.stock);
    if mugs != Some(50) {
        return Err(wrong(format!(
            "mugs left after di's refused checkout: {mugs:?}"
        )));
    }
    lines.push("di's checkout sold nothing: one lamp left, di wanted two (the mugs stay)".into());

    let ada = market
        .totals_once("ada", 1, Duration::from_secs(30))
        .await?;
    let bo = market.totals_once("bo", 1, Duration::from_secs(30)).await?;
    if (ada, bo)
        != (
            Totals {
                sales: 5_000,
                orders: 1,
            },
            Totals {
                sales: 4_000,
                orders: 1,
            },
        )
    {
        return Err(wrong(format!("totals: ada {ada:?}, bo {bo:?}")));
    }
    lines.push(format!(
        "the totals group counted ada ${:.2}, bo ${:.2}",
        ada.sales as f64 / 100.0,
        bo.sales as f64 / 100.0
    ));
    totals.stop().await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !market.cart("ed").await?.is_empty() {
        if tokio::time::Instant::now() >= deadline {
            return Err(wrong("ed's abandoned cart did not expire".into()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lines.push("ed's abandoned cart expired".into());
    if market.checkout("ed").await? != Checkout::EmptyCart {
        return Err(wrong("ed's expired cart checked out".into()));
    }
    Ok(lines)
}
