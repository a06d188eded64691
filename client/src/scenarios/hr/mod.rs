//! Departments and employees, after the Azure guide's "modeling relationships".
//!
//! One partition per department holds the department row and its employees. Two declared
//! partition indexes find employees without filters: `ByEmail` (unique: a second employee with
//! one email in a department is refused) and `ByLastName` (a prefix of last names is a range of
//! it). Trestle keeps them in the commit that writes the employee. Every hire and termination
//! commits the employee and the department's `EmployeeCount` in one transaction, the count by a
//! patch increment of +1 or -1: no condition on the department's ETag, so concurrent hires never
//! conflict, and the count is always exact.
//!
//! What the declared indexes replace is the guide's hand-made "intra-partition secondary index":
//! a full copy of the employee under a second RowKey per lookup (`email|<email>`,
//! `name|<last>|<id>`), inserted, moved and deleted in the same transaction as the employee row.
//! That pattern still works on Trestle (and is the way on Azure), at the price of a copy per index
//! to write and to keep in step in every transaction.
//!
//! Employees also carry denormalized copies of the department's name and manager. That is the
//! guide's trade-off: a list of employees needs no second read (the normalized model would read the
//! department row, see [`DepartmentCache`] for the join in the client), but renaming a department
//! must rewrite every copy ([`Hr::rename_department`], in transactions of at most 100). Denormalize
//! what is read often and changed rarely; keep normalized what changes often.
//!
//! A transfer moves an employee to another partition: on Trestle one transaction across the two
//! partitions moves the row and both counts together ([`Hr::transfer`]). Azure Table cannot span
//! partitions in a transaction; there the move is made eventually consistent and crash-safe
//! ([`Hr::transfer_eventually`]): a durable transfer record is written first, each later step is
//! idempotent, and [`Hr::resume_transfers`] completes any transfer interrupted at any step.

mod join;
mod transfer;

use serde::{Deserialize, Serialize};

pub use join::DepartmentCache;
pub use transfer::TransferStep;

use super::scenario_retry;
use crate::keys::{compound, prefix_end};
use crate::{
    retry_on_conflict, Entity, Error, ErrorCode, ErrorKind, Filter, IfMatch, IndexDefinition,
    Patch, Result, TableClient,
};

/// The unique partition index of employees by email.
pub const BY_EMAIL: &str = "ByEmail";
/// The partition index of employees by last name.
pub const BY_LAST_NAME: &str = "ByLastName";

/// The row key of a department's own row.
pub const DEPARTMENT_ROW: &str = "department";

/// A department (its partition's `department` row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Department {
    /// Display name.
    #[serde(rename = "Name")]
    pub name: String,
    /// The manager's name.
    #[serde(rename = "Manager")]
    pub manager: String,
    /// How many employees the partition holds; kept exact by transactions.
    #[serde(rename = "EmployeeCount")]
    pub employee_count: i64,
}

/// An employee as stored (with denormalized department name and manager).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Employee {
    /// Unique id (across departments).
    #[serde(rename = "EmployeeId")]
    pub id: String,
    /// First name.
    #[serde(rename = "FirstName")]
    pub first_name: String,
    /// Last name.
    #[serde(rename = "LastName")]
    pub last_name: String,
    /// Email, unique within the department.
    #[serde(rename = "Email")]
    pub email: String,
    /// Copy of the department's name.
    #[serde(rename = "DepartmentName")]
    pub department_name: String,
    /// Copy of the department's manager.
    #[serde(rename = "Manager")]
    pub manager: String,
}

/// What a hire needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEmployee {
    /// Unique id (across departments).
    pub id: String,
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// Email, unique within the department.
    pub email: String,
}

/// A contractor: a person in the department who is not an employee (and not counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contractor {
    /// Unique id.
    #[serde(rename = "ContractorId")]
    pub id: String,
    /// Name.
    #[serde(rename = "Name")]
    pub name: String,
    /// The agency they come from.
    #[serde(rename = "Agency")]
    pub agency: String,
}

/// People of several kinds in one table, told apart by the `Kind` property (inheritance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
pub enum Person {
    /// An employee.
    Employee(Employee),
    /// A contractor.
    Contractor(Contractor),
}

#[derive(Debug, Serialize)]
struct DepartmentCopies<'a> {
    #[serde(rename = "DepartmentName")]
    department_name: &'a str,
    #[serde(rename = "Manager")]
    manager: &'a str,
}

#[derive(Debug, Serialize)]
struct DepartmentRename<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
}

fn employee_row(id: &str) -> String {
    compound(&["emp", id])
}

fn contractor_row(id: &str) -> String {
    compound(&["contractor", id])
}

fn transfer_row(id: &str) -> String {
    compound(&["transfer", id])
}

/// The HR store over one table.
#[derive(Debug, Clone)]
pub struct Hr {
    table: TableClient,
    interrupt_after: Option<TransferStep>,
}

impl Hr {
    /// The store over `table` (see [`Hr::setup`]).
    pub fn new(table: TableClient) -> Hr {
        Hr {
            table,
            interrupt_after: None,
        }
    }

    /// Creates the table with its two indexes, if needed, keeping a change feed (which
    /// [`DepartmentCache`] follows).
    pub async fn setup(&self) -> Result<()> {
        let indexes = [
            IndexDefinition::partition(BY_EMAIL, ["Email"]).unique(),
            IndexDefinition::partition(BY_LAST_NAME, ["LastName"]),
        ];
        match self.table.create_with_indexes(indexes).await {
            Err(error) if error.code() == Some(ErrorCode::TableAlreadyExists) => {}
            other => other?,
        }
        self.table.set_change_feed(true, 0).await
    }

    /// Creates a department with no employees.
    pub async fn create_department(&self, id: &str, name: &str, manager: &str) -> Result<()> {
        let department = Department {
            name: name.into(),
            manager: manager.into(),
            employee_count: 0,
        };
        self.table
            .insert((id, DEPARTMENT_ROW), &department)
            .await
            .map(drop)
    }

    /// Reads a department.
    pub async fn department(&self, id: &str) -> Result<Entity<Department>> {
        self.table.get((id, DEPARTMENT_ROW)).await
    }

    /// Hires an employee: the employee row and the count (a patch increment) in one transaction.
    ///
    /// # Errors
    /// `is_conflict()` if the id (`EntityAlreadyExists`) or the email (`IndexValueAlreadyExists`)
    /// is taken in the department.
    pub async fn hire(&self, department_id: &str, new: NewEmployee) -> Result<Employee> {
        let department = self.department(department_id).await?;
        let employee = Employee {
            id: new.id,
            first_name: new.first_name,
            last_name: new.last_name,
            email: new.email,
            department_name: department.value.name,
            manager: department.value.manager,
        };
        let mut tx = self.table.transaction(department_id);
        self.add_employee(&mut tx, department_id, &employee)?;
        tx.commit().await?;
        Ok(employee)
    }

    /// Adds the count's increment (operation 0) and the employee row (operation 1) to `tx`.
    fn add_employee(
        &self,
        tx: &mut crate::Transaction,
        department_id: &str,
        employee: &Employee,
    ) -> Result<()> {
        let one_more = Patch::new().increment("EmployeeCount", 1i64);
        tx.patch((department_id, DEPARTMENT_ROW), &one_more)?;
        let person = Person::Employee(employee.clone());
        tx.insert((department_id, employee_row(&employee.id)), &person)?;
        Ok(())
    }

    /// Reads an employee.
    pub async fn employee(
        &self,
        department_id: &str,
        employee_id: &str,
    ) -> Result<Entity<Employee>> {
        let person = self
            .table
            .get::<Person>((department_id, employee_row(employee_id)))
            .await?;
        into_employee(person)
    }

    /// Terminates an employee: the row goes and the count drops (a patch increment), in one
    /// transaction; only a concurrent change of the employee makes it retry.
    pub async fn terminate(&self, department_id: &str, employee_id: &str) -> Result<()> {
        retry_on_conflict(scenario_retry(), move || async move {
            let employee = self.employee(department_id, employee_id).await?;
            let mut tx = self.table.transaction(department_id);
            let one_less = Patch::new().increment("EmployeeCount", -1i64);
            tx.patch((department_id, DEPARTMENT_ROW), &one_less)?;
            tx.delete((department_id, employee_row(employee_id)), &employee.etag)?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Changes an employee's name or email: one conditional update (the indexes follow).
    ///
    /// # Errors
    /// `is_conflict()` if the new email is another employee's in the department.
    pub async fn update_employee(
        &self,
        department_id: &str,
        employee_id: &str,
        first_name: &str,
        last_name: &str,
        email: &str,
    ) -> Result<Employee> {
        retry_on_conflict(scenario_retry(), move || async move {
            let current = self.employee(department_id, employee_id).await?;
            let new = Employee {
                first_name: first_name.into(),
                last_name: last_name.into(),
                email: email.into(),
                ..current.value
            };
            let person = Person::Employee(new.clone());
            self.table
                .update(
                    (department_id, employee_row(employee_id)),
                    &person,
                    &current.etag,
                )
                .await?;
            Ok(new)
        })
        .await
    }

    /// The employee with this email: one lookup in the `ByEmail` index.
    pub async fn find_by_email(
        &self,
        department_id: &str,
        email: &str,
    ) -> Result<Option<Employee>> {
        let found = self
            .table
            .query::<Person>()
            .index(BY_EMAIL)
            .partition(department_id)
            .filter(Filter::eq("Email", email))
            .all()
            .await?;
        found
            .into_iter()
            .next()
            .map(|person| into_employee(person).map(|e| e.value))
            .transpose()
    }

    /// Employees whose last name starts with `prefix`, by last name: one range of the
    /// `ByLastName` index.
    pub async fn list_by_last_name(
        &self,
        department_id: &str,
        prefix: &str,
    ) -> Result<Vec<Employee>> {
        let mut filter = Filter::ge("LastName", prefix);
        if let Some(end) = prefix_end(prefix) {
            filter = filter.and(Filter::lt("LastName", end.as_str()));
        }
        let rows = self
            .table
            .query::<Person>()
            .index(BY_LAST_NAME)
            .partition(department_id)
            .filter(filter)
            .all()
            .await?;
        rows.into_iter()
            .map(|person| into_employee(person).map(|e| e.value))
            .collect()
    }

    /// The department and all its employees, from one partition query.
    pub async fn department_with_employees(
        &self,
        department_id: &str,
    ) -> Result<(Department, Vec<Employee>)> {
        let rows = self.table.entities().partition(department_id).all().await?;
        let mut department = None;
        let mut employees = Vec::new();
        for row in rows {
            if row.key.row_key == DEPARTMENT_ROW {
                department = Some(crate::from_properties::<Department>(row.value.0)?);
            } else if row.key.row_key.starts_with(&compound(&["emp", ""])) {
                if let Person::Employee(employee) = crate::from_properties::<Person>(row.value.0)? {
                    employees.push(employee);
                }
            }
        }
        let department = department.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("department {department_id} does not exist"),
            )
        })?;
        Ok((department, employees))
    }

    /// Adds a contractor to a department (not counted as an employee).
    pub async fn add_contractor(&self, department_id: &str, contractor: Contractor) -> Result<()> {
        let row = contractor_row(&contractor.id);
        self.table
            .insert((department_id, row), &Person::Contractor(contractor))
            .await
            .map(drop)
    }

    /// Everyone in a department, employees and contractors, decoded by their `Kind`.
    pub async fn people(&self, department_id: &str) -> Result<Vec<Person>> {
        let mut people = Vec::new();
        for kind in ["contractor", "emp"] {
            let rows = self
                .table
                .query::<Person>()
                .partition(department_id)
                .row_key_prefix(compound(&[kind, ""]))
                .all()
                .await?;
            people.extend(rows.into_iter().map(|row| row.value));
        }
        Ok(people)
    }

    /// Renames a department and rewrites every denormalized copy of its name, in transactions of
    /// at most 100 operations (the first one also renames the department row). Each copy is
    /// updated conditionally on the ETag it was read with; a conflict re-reads and goes on.
    pub async fn rename_department(&self, department_id: &str, new_name: &str) -> Result<()> {
        loop {
            let department = self.department(department_id).await?;
            let manager = department.value.manager.clone();
            let copies = self.stale_copies(department_id, new_name).await?;
            let mut tx = self.table.transaction(department_id);
            if department.value.name != new_name {
                tx.merge(
                    (department_id, DEPARTMENT_ROW),
                    &DepartmentRename { name: new_name },
                    &department.etag,
                )?;
            }
            let mut pending = copies.into_iter().peekable();
            if tx.is_empty() && pending.peek().is_none() {
                return Ok(());
            }
            let update = DepartmentCopies {
                department_name: new_name,
                manager: &manager,
            };
            let mut conflicted = false;
            loop {
                while tx.len() < crate::MAX_OPERATIONS {
                    let Some((row_key, etag)) = pending.next() else {
                        break;
                    };
                    tx.merge((department_id, row_key), &update, IfMatch::Tag(etag))?;
                }
                match tx.commit().await {
                    Ok(_) => {}
                    Err(error) if error.is_precondition_failed() => conflicted = true,
                    Err(error) => return Err(error),
                }
                if pending.peek().is_none() {
                    break;
                }
                tx = self.table.transaction(department_id);
            }
            if !conflicted {
                return Ok(());
            }
        }
    }

    /// Rows of a department holding an employee copy whose department name is not `name`.
    async fn stale_copies(
        &self,
        department_id: &str,
        name: &str,
    ) -> Result<Vec<(String, crate::ETag)>> {
        let filter = Filter::ne("DepartmentName", name).and(Filter::eq("Kind", "Employee"));
        let copies = self.table.entities().partition(department_id);
        let rows = copies.filter(filter).select(["Kind"]).all().await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.key.row_key, row.etag))
            .collect())
    }
}

fn into_employee(person: Entity<Person>) -> Result<Entity<Employee>> {
    match person.value {
        Person::Employee(employee) => Ok(Entity {
            key: person.key,
            etag: person.etag,
            timestamp: person.timestamp,
            value: employee,
        }),
        Person::Contractor(_) => Err(Error::new(
            ErrorKind::Mapping,
            format!(
                "row {} is a contractor, not an employee",
                person.key.row_key
            ),
        )),
    }
}
