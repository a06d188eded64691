//! Departments and employees, end to end through the SDK.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example hr` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::example_table;
use trestle_client::scenarios::hr::{DepartmentCache, Hr, NewEmployee};

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("HrExample").await?;
    println!("{using}");
    let hr = Hr::new(table.clone());
    hr.setup().await?;

    hr.create_department("eng", "Engineering", "Ada Lovelace")
        .await?;
    hr.create_department("ops", "Operations", "Grace Hopper")
        .await?;
    println!("Created departments eng and ops");

    for (id, first, last) in [
        ("e1", "Alan", "Turing"),
        ("e2", "Barbara", "Liskov"),
        ("e3", "Tony", "Hoare"),
    ] {
        let email = format!("{}@example.com", first.to_lowercase());
        hr.hire(
            "eng",
            NewEmployee {
                id: id.into(),
                first_name: first.into(),
                last_name: last.into(),
                email,
            },
        )
        .await?;
        println!("Hired {first} {last} into eng (employee row, two index rows and the count in one transaction)");
    }
    let (department, employees) = hr.department_with_employees("eng").await?;
    println!(
        "{} has EmployeeCount {} and {} employee rows (one partition query)",
        department.name,
        department.employee_count,
        employees.len()
    );

    let found = hr.find_by_email("eng", "barbara@example.com").await?;
    println!(
        "Point read on the email index: {:?}",
        found.map(|e| format!("{} {}", e.first_name, e.last_name))
    );
    let names: Vec<_> = hr
        .list_by_last_name("eng", "H")
        .await?
        .into_iter()
        .map(|e| e.last_name)
        .collect();
    println!("Prefix scan of the last-name index for 'H': {names:?}");

    // One transaction across the two departments moves Alan and both counts together.
    hr.transfer("e1", "eng", "ops").await?;
    let (eng, ops) = (
        hr.department("eng").await?.value,
        hr.department("ops").await?.value,
    );
    println!(
        "Transferred Alan to ops: eng now counts {}, ops counts {}",
        eng.employee_count, ops.employee_count
    );
    println!(
        "Interrupted transfers completed on resume: {}",
        hr.resume_transfers().await?
    );

    hr.rename_department("eng", "Platform Engineering").await?;
    let (_, employees) = hr.department_with_employees("eng").await?;
    println!(
        "Renamed eng; every denormalized copy now says {:?}",
        employees.first().map(|e| e.department_name.as_str())
    );

    let cache = DepartmentCache::load(&hr).await?;
    let (_, ops_people) = hr.department_with_employees("ops").await?;
    for (employee, department) in cache.decorate("ops", &ops_people) {
        println!(
            "Join in the client: {} {} works for {}",
            employee.first_name,
            employee.last_name,
            department.map_or("?", |d| d.manager.as_str())
        );
    }
    table.delete_table().await?;
    println!("Deleted table {}", table.name());
    Ok(())
}
