//! The HR, expenses, people, books, alarms and marketplace scenarios of the SDK against the real server.

mod common;

use std::time::Duration;

use common::TestServer;
use trestle_client::scenarios::books::{self, Library};
use trestle_client::scenarios::expenses::{ExpenseItem, Expenses, Status, MAX_ITEMS};
use trestle_client::scenarios::hr::{
    Contractor, Department, DepartmentCache, Hr, NewEmployee, Person, TransferStep,
};
use trestle_client::scenarios::orders::{self, Checkout, Marketplace};
use trestle_client::scenarios::people::{self, ContactDetail, People};
use trestle_client::ErrorKind;

fn new_employee(id: &str, last: &str) -> NewEmployee {
    NewEmployee {
        id: id.into(),
        first_name: format!("First{id}"),
        last_name: last.into(),
        email: format!("{id}@example.com"),
    }
}

async fn hr(server: &TestServer) -> Hr {
    let hr = Hr::new(server.sdk().await.table("Staff"));
    hr.setup().await.unwrap();
    hr.create_department("eng", "Engineering", "Ada")
        .await
        .unwrap();
    hr.create_department("ops", "Operations", "Grace")
        .await
        .unwrap();
    hr
}

async fn count(hr: &Hr, department: &str) -> (i64, usize) {
    let (department, employees) = hr.department_with_employees(department).await.unwrap();
    (department.employee_count, employees.len())
}

#[tokio::test]
async fn hires_terminations_and_indexes() {
    let server = TestServer::start().await;
    let hr = hr(&server).await;
    hr.hire("eng", new_employee("e1", "Lovelace"))
        .await
        .unwrap();
    hr.hire("eng", new_employee("e2", "Hopper")).await.unwrap();
    hr.hire("eng", new_employee("e3", "Hoare")).await.unwrap();
    assert_eq!(count(&hr, "eng").await, (3, 3));

    let duplicate = hr
        .hire(
            "eng",
            NewEmployee {
                id: "e4".into(),
                ..new_employee("e1", "Other")
            },
        )
        .await
        .unwrap_err();
    assert!(duplicate.is_conflict(), "the email is taken: {duplicate}");
    assert_eq!(
        count(&hr, "eng").await,
        (3, 3),
        "a refused hire changes nothing"
    );

    assert_eq!(
        hr.find_by_email("eng", "e2@example.com")
            .await
            .unwrap()
            .unwrap()
            .last_name,
        "Hopper"
    );
    assert!(hr
        .find_by_email("eng", "nobody@example.com")
        .await
        .unwrap()
        .is_none());
    let hos: Vec<_> = hr
        .list_by_last_name("eng", "Ho")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.last_name)
        .collect();
    assert_eq!(hos, ["Hoare", "Hopper"]);

    hr.update_employee("eng", "e2", "Grace", "Brewster", "grace@example.com")
        .await
        .unwrap();
    assert!(
        hr.find_by_email("eng", "e2@example.com")
            .await
            .unwrap()
            .is_none(),
        "the old email left the index"
    );
    assert_eq!(
        hr.find_by_email("eng", "grace@example.com")
            .await
            .unwrap()
            .unwrap()
            .first_name,
        "Grace"
    );
    assert_eq!(hr.list_by_last_name("eng", "Ho").await.unwrap().len(), 1);
    assert_eq!(
        hr.list_by_last_name("eng", "Brew").await.unwrap()[0].id,
        "e2"
    );

    hr.terminate("eng", "e1").await.unwrap();
    assert_eq!(count(&hr, "eng").await, (2, 2));
    assert!(hr
        .find_by_email("eng", "e1@example.com")
        .await
        .unwrap()
        .is_none());
    assert!(hr.terminate("eng", "e1").await.unwrap_err().is_not_found());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_hires_keep_the_count_exact() {
    let server = TestServer::start().await;
    let hr = hr(&server).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let hr = hr.clone();
        tasks.push(tokio::spawn(async move {
            hr.hire("eng", new_employee(&format!("c{i:02}"), "Concurrent"))
                .await
                .unwrap()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(count(&hr, "eng").await, (32, 32));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_moves_the_employee_and_both_counts_in_one_transaction() {
    let server = TestServer::start().await;
    let hr = hr(&server).await;
    for i in 0..6 {
        hr.hire("eng", new_employee(&format!("m{i}"), "Mover"))
            .await
            .unwrap();
    }
    let client = server.sdk().await;
    let moving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let moving = moving.clone();
        tokio::spawn(async move {
            let departments = [
                ("Staff", ("eng", "department")),
                ("Staff", ("ops", "department")),
            ];
            let mut snapshots = 0;
            while moving.load(std::sync::atomic::Ordering::SeqCst) || snapshots == 0 {
                let snapshot = client.get_many(departments).await.unwrap();
                let count = |at| {
                    let department = snapshot.get::<Department>(at).unwrap().unwrap();
                    department.value.employee_count
                };
                assert_eq!(count(0) + count(1), 6, "a snapshot saw half a transfer");
                snapshots += 1;
            }
            snapshots
        })
    };
    let transfers: Vec<_> = (0..6)
        .map(|i| {
            let hr = hr.clone();
            tokio::spawn(async move { hr.transfer(&format!("m{i}"), "eng", "ops").await })
        })
        .collect();
    for transfer in transfers {
        transfer.await.unwrap().unwrap();
    }
    moving.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(reader.await.unwrap() > 0);
    assert_eq!(
        (count(&hr, "eng").await, count(&hr, "ops").await),
        ((0, 0), (6, 6))
    );
    let moved = hr.find_by_email("ops", "m3@example.com").await.unwrap();
    assert_eq!(moved.unwrap().department_name, "Operations");
    // Nothing to resume: no transfer record was written.
    assert_eq!(hr.resume_transfers().await.unwrap(), 0);
    // A transfer of someone who is not there changes nothing.
    let missing = hr.transfer("m0", "eng", "ops").await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
}

#[tokio::test]
async fn transfers_complete_and_interrupted_ones_resume_at_every_step() {
    let server = TestServer::start().await;
    let mut hr = hr(&server).await;
    for i in 0..3 {
        hr.hire("eng", new_employee(&format!("t{i}"), "Mover"))
            .await
            .unwrap();
    }
    hr.transfer_eventually("t0", "eng", "ops").await.unwrap();
    assert_eq!(
        (count(&hr, "eng").await, count(&hr, "ops").await),
        ((2, 2), (1, 1))
    );
    assert_eq!(
        hr.employee("ops", "t0")
            .await
            .unwrap()
            .value
            .department_name,
        "Operations"
    );

    for (id, step) in [
        ("t1", TransferStep::Recorded),
        ("t2", TransferStep::Arrived),
    ] {
        hr.interrupt_transfers_after(Some(step));
        let interrupted = hr.transfer_eventually(id, "eng", "ops").await.unwrap_err();
        assert!(
            interrupted.message().contains("interrupted"),
            "{interrupted}"
        );
    }
    hr.interrupt_transfers_after(None);
    // t2 arrived in ops but has not left eng yet: the counts are off until the transfer resumes.
    assert_eq!(count(&hr, "ops").await, (2, 2));
    assert_eq!(hr.resume_transfers().await.unwrap(), 2);
    assert_eq!(
        (count(&hr, "eng").await, count(&hr, "ops").await),
        ((0, 0), (3, 3))
    );
    assert_eq!(
        hr.resume_transfers().await.unwrap(),
        0,
        "nothing left to resume"
    );
    assert!(hr
        .find_by_email("eng", "t1@example.com")
        .await
        .unwrap()
        .is_none());
    assert!(hr
        .find_by_email("ops", "t1@example.com")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn renaming_a_department_rewrites_every_denormalized_copy() {
    let server = TestServer::start().await;
    let hr = hr(&server).await;
    // 150 employees: 150 rows carry the name, rewritten in two transactions.
    for i in 0..150 {
        hr.hire(
            "eng",
            new_employee(&format!("r{i:03}"), &format!("Name{i:03}")),
        )
        .await
        .unwrap();
    }
    hr.rename_department("eng", "Platform").await.unwrap();
    let (department, employees) = hr.department_with_employees("eng").await.unwrap();
    assert_eq!(department.name, "Platform");
    assert!(employees.iter().all(|e| e.department_name == "Platform"));
    assert!(hr
        .list_by_last_name("eng", "Name")
        .await
        .unwrap()
        .iter()
        .all(|e| e.department_name == "Platform"));
    assert_eq!(
        hr.find_by_email("eng", "r007@example.com")
            .await
            .unwrap()
            .unwrap()
            .department_name,
        "Platform"
    );
    assert_eq!(department.employee_count, 150);
}

#[tokio::test]
async fn the_client_side_join_and_inheritance() {
    let server = TestServer::start().await;
    let hr = hr(&server).await;
    hr.hire("ops", new_employee("j1", "Joined")).await.unwrap();
    hr.add_contractor(
        "ops",
        Contractor {
            id: "k1".into(),
            name: "Kim".into(),
            agency: "Acme".into(),
        },
    )
    .await
    .unwrap();
    let mut cache = DepartmentCache::load(&hr).await.unwrap();
    assert_eq!(cache.get("eng").unwrap().manager, "Ada");
    let (_, employees) = hr.department_with_employees("ops").await.unwrap();
    let decorated = cache.decorate("ops", &employees);
    assert_eq!(decorated[0].1.unwrap().name, "Operations");
    hr.create_department("hr", "People", "Lin").await.unwrap();
    assert!(cache.get("hr").is_none());
    cache.refresh().await.unwrap();
    assert_eq!(cache.get("hr").unwrap().name, "People");
    // The change feed tells the cache what changed: the department rows a rename and a hire (its
    // count) changed are taken from the feed, employee rows are passed over.
    hr.rename_department("eng", "R&D").await.unwrap();
    hr.hire("hr", new_employee("k9", "Kay")).await.unwrap();
    assert_eq!(cache.get("eng").unwrap().name, "Engineering");
    let departments_changed = cache.catch_up().await.unwrap();
    assert!(departments_changed >= 1, "{departments_changed}");
    assert_eq!(cache.get("eng").unwrap().name, "R&D");
    assert_eq!(cache.catch_up().await.unwrap(), 0, "nothing new");

    let people = hr.people("ops").await.unwrap();
    assert_eq!(people.len(), 2);
    assert!(matches!(&people[0], Person::Contractor(c) if c.agency == "Acme"));
    assert!(matches!(&people[1], Person::Employee(e) if e.id == "j1"));
    assert_eq!(
        count(&hr, "ops").await,
        (1, 1),
        "contractors are not counted"
    );
}

fn item(description: &str, cents: i64) -> ExpenseItem {
    ExpenseItem {
        description: description.into(),
        amount_cents: cents,
    }
}

#[tokio::test]
async fn expenses_and_their_items_change_atomically() {
    let server = TestServer::start().await;
    let expenses = Expenses::new(server.sdk().await.table("Expenses"));
    expenses.setup().await.unwrap();
    let first = expenses
        .submit(
            "alice",
            "Conference",
            &[item("Ticket", 50_000), item("Hotel", 30_000)],
        )
        .await
        .unwrap();
    let second = expenses
        .submit("alice", "Team lunch", &[item("Food", 12_000)])
        .await
        .unwrap();
    expenses
        .submit("bob", "Books", &[item("Rust book", 4_000)])
        .await
        .unwrap();

    let got = expenses.get("alice", &first).await.unwrap().unwrap();
    assert_eq!(
        (
            got.header.value.total_cents,
            got.header.value.item_count,
            got.items.len()
        ),
        (80_000, 2, 2)
    );
    assert_eq!(got.items[0], ("000".to_owned(), item("Ticket", 50_000)));

    let recent = expenses.recent("alice", 1).await.unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].0, second, "newest first");
    assert_eq!(expenses.recent("alice", 10).await.unwrap().len(), 2);

    let added = expenses
        .add_item("alice", &first, item("Taxi", 2_500))
        .await
        .unwrap();
    expenses.remove_item("alice", &first, "000").await.unwrap();
    let got = expenses.get("alice", &first).await.unwrap().unwrap();
    assert_eq!(
        (got.header.value.total_cents, got.header.value.item_count),
        (32_500, 2)
    );
    assert_eq!(
        got.items
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["001", added.as_str()]
    );

    expenses.delete("alice", &first).await.unwrap();
    assert!(expenses.get("alice", &first).await.unwrap().is_none());
    let leftovers = server
        .sdk()
        .await
        .table("Expenses")
        .query::<trestle_client::Properties>()
        .partition("alice")
        .row_key_prefix(first.as_str())
        .all()
        .await
        .unwrap();
    assert!(leftovers.is_empty(), "no item outlives its expense");
    assert!(expenses.get("alice", &second).await.unwrap().is_some());
}

#[tokio::test]
async fn an_approval_and_the_approver_s_totals_change_together() {
    let server = TestServer::start().await;
    let expenses = Expenses::new(server.sdk().await.table("Totals"));
    expenses.setup().await.unwrap();
    let mut submitted = Vec::new();
    for (owner, cents) in [("ann", 1_000), ("bob", 2_500), ("ann", 700)] {
        let id = expenses
            .submit(owner, "Train", &[item("Ticket", cents)])
            .await
            .unwrap();
        let etag = expenses.get(owner, &id).await.unwrap().unwrap().header.etag;
        submitted.push((owner, id, etag));
    }
    for (owner, id, etag) in &submitted {
        expenses.approve_as("dora", owner, id, etag).await.unwrap();
    }
    // A second decision on a decided expense changes neither the expense nor the totals.
    let (owner, id, stale) = &submitted[0];
    let again = expenses
        .approve_as("dora", owner, id, stale)
        .await
        .unwrap_err();
    assert!(
        again.is_conflict() || again.is_precondition_failed(),
        "{again}"
    );
    let totals = expenses.approver_totals("dora").await.unwrap();
    assert_eq!((totals.approved_count, totals.approved_cents), (3, 4_200));
    assert_eq!(
        expenses.approver_totals("nobody").await.unwrap(),
        Default::default()
    );
}

#[tokio::test]
async fn two_concurrent_approvers_exactly_one_wins() {
    let server = TestServer::start().await;
    let expenses = Expenses::new(server.sdk().await.table("Approvals"));
    expenses.setup().await.unwrap();
    let id = expenses
        .submit("carol", "Laptop", &[item("Laptop", 200_000)])
        .await
        .unwrap();
    let seen = expenses
        .get("carol", &id)
        .await
        .unwrap()
        .unwrap()
        .header
        .etag;
    let (a, b) = tokio::join!(
        expenses.approve("carol", &id, &seen),
        expenses.reject("carol", &id, &seen)
    );
    assert_eq!(
        usize::from(a.is_ok()) + usize::from(b.is_ok()),
        1,
        "{a:?} {b:?}"
    );
    let loser = a.err().or(b.err()).unwrap();
    assert!(
        loser.is_precondition_failed() || loser.is_conflict(),
        "{loser}"
    );
    let status = expenses
        .get("carol", &id)
        .await
        .unwrap()
        .unwrap()
        .header
        .value
        .status;
    assert_ne!(status, Status::Submitted);
}

#[tokio::test]
async fn an_expense_holds_at_most_99_items() {
    let server = TestServer::start().await;
    let expenses = Expenses::new(server.sdk().await.table("Limits"));
    expenses.setup().await.unwrap();
    let items: Vec<_> = (0..MAX_ITEMS).map(|i| item(&format!("i{i}"), 1)).collect();
    let id = expenses.submit("dave", "Many", &items).await.unwrap();
    let full = expenses
        .add_item("dave", &id, item("one more", 1))
        .await
        .unwrap_err();
    assert_eq!(full.kind(), ErrorKind::InvalidInput);
    assert!(full.message().contains("at most 99 items"), "{full}");
    let too_many: Vec<_> = (0..=MAX_ITEMS).map(|i| item(&format!("i{i}"), 1)).collect();
    assert_eq!(
        expenses
            .submit("dave", "Too many", &too_many)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    expenses.delete("dave", &id).await.unwrap();
    assert!(expenses.get("dave", &id).await.unwrap().is_none());
}

#[tokio::test]
async fn the_people_scenario_finds_people_by_city_through_embedded_addresses() {
    let server = TestServer::start().await;
    let people = People::new(server.sdk().await.table("People"));
    let report = people::tour(&people).await.unwrap();
    assert_eq!(report.len(), 4, "{report:#?}");
    assert!(report[1].contains(r#"["Ada", "Alan"]"#), "{report:#?}");
    assert!(
        report[2].contains(r#"["Ada", "Alan", "Grace"]"#),
        "{report:#?}"
    );
    let grace = people.get("grace").await.unwrap().value;
    assert_eq!(grace.addresses[0].city, "Seattle");
    assert!(matches!(
        &grace.contact_details[..],
        [
            ContactDetail::Phone {
                extension: None,
                ..
            },
            ContactDetail::Email { .. }
        ]
    ));
}

#[tokio::test]
async fn the_books_scenario_links_authors_and_books_both_ways() {
    let server = TestServer::start().await;
    let library = Library::new(server.sdk().await.table("Library"));
    let report = books::tour(&library).await.unwrap();
    assert_eq!(report.len(), 4, "{report:#?}");
    assert!(
        report[1].contains(r#"["Notes", "Compilers"]"#),
        "{report:#?}"
    );
    assert!(report[2].contains(r#"["Ada", "Grace"]"#), "{report:#?}");
    // The refused book wrote nothing: no book, and no author credited with it.
    let grace = library.author("a2").await.unwrap().value;
    assert_eq!(
        (grace.books, grace.count_of_books),
        (vec!["b2".to_owned()], 1)
    );
    assert!(library.books_of("a9").await.unwrap().is_empty());
    assert!(library.authors_of("b4").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_following_the_feed_pages_for_each_serious_alarm_as_it_commits() {
    let server = TestServer::start().await;
    let alarms = server.sdk().await.table("Alarms");
    let report = trestle_client::scenarios::alarms::tour(&alarms)
        .await
        .unwrap();
    assert_eq!(
        report,
        [
            "paged on-call: server room at 41 C at site-1 (level 4)",
            "paged on-call: smoke detected at site-2 (level 5)",
            "paged on-call: UPS on battery at site-1 (level 3)",
            "the three serious alarms are handled, the others left alone",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marketplace_tour_sells_refuses_expires_and_counts_totals() {
    let server = TestServer::start().await;
    let market = Marketplace::new(server.sdk().await, "Tour").cart_seconds(2);
    market.setup().await.unwrap();
    let report = orders::tour(&market).await.unwrap();
    assert_eq!(
        report,
        [
            "ada's items of at most $10.00, by the price index: [\"mug\"]",
            "cy checked out 2 lines from two sellers in one transaction",
            "di's checkout sold nothing: one lamp left, di wanted two (the mugs stay)",
            "the totals group counted ada $50.00, bo $40.00",
            "ed's abandoned cart expired",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checkouts_never_oversell_and_the_totals_count_each_order_once() {
    let server = TestServer::start().await;
    let market = Marketplace::new(server.sdk().await, "Busy");
    market.setup().await.unwrap();
    let stock = [
        ("ada", "lamp", 2_500, 10),
        ("ada", "mug", 900, 30),
        ("bo", "pen", 4_000, 8),
    ];
    for (seller, id, price, stock) in stock {
        let item = orders::Item {
            name: id.into(),
            price,
            stock,
        };
        market.offer(seller, id, &item).await.unwrap();
    }
    let totals = market.start_totals(2).unwrap();
    let buyers = (0..16).map(|b| {
        let market = market.clone();
        tokio::spawn(async move {
            let buyer = format!("buyer{b:02}");
            market.add_to_cart(&buyer, "ada", "lamp", b % 3 + 1).await?;
            market.add_to_cart(&buyer, "ada", "mug", 2).await?;
            if b % 2 == 0 {
                market
                    .add_to_cart(&buyer, "bo", "pen", b % 4 / 2 + 1)
                    .await?;
            }
            let outcome = market.checkout(&buyer).await?;
            Ok::<_, trestle_client::Error>((buyer, outcome))
        })
    });
    let mut sold = 0;
    for buyer in buyers.collect::<Vec<_>>() {
        let (buyer, outcome) = buyer.await.unwrap().unwrap();
        match outcome {
            Checkout::Ordered(lines) => {
                sold += 1;
                assert_eq!(
                    lines.len(),
                    market.recent_orders(&buyer).await.unwrap().len()
                );
                assert!(market.cart(&buyer).await.unwrap().is_empty(), "{buyer}");
            }
            Checkout::OutOfStock(..) => {
                assert!(!market.cart(&buyer).await.unwrap().is_empty(), "{buyer}");
                assert!(market.recent_orders(&buyer).await.unwrap().is_empty());
            }
            Checkout::EmptyCart => panic!("{buyer}'s cart was empty"),
        }
    }
    assert!(sold > 0, "nothing sold");
    for (seller, id, _, initial) in stock {
        let left = market.item(seller, id).await.unwrap().unwrap().stock;
        let ordered: i64 = (market.orders(seller).await.unwrap().iter())
            .filter(|order| order.item == id)
            .map(|order| order.quantity)
            .sum();
        assert!(left >= 0, "{id}: {left} left");
        assert_eq!(
            initial - left,
            ordered,
            "{id}: sold exactly what the orders say"
        );
    }
    for seller in ["ada", "bo"] {
        let orders = market.orders(seller).await.unwrap();
        let expected = orders::Totals {
            sales: orders.iter().map(|order| order.amount).sum(),
            orders: orders.len() as i64,
        };
        let counted = (market.totals_once(seller, expected.orders, Duration::from_secs(60)))
            .await
            .unwrap();
        assert_eq!(counted, expected, "{seller}'s totals");
    }
    totals.stop().await.unwrap();
}
