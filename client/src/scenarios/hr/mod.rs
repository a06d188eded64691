//! Departments and employees, after the Azure guide's "modeling relationships".
//!
//! One partition per department holds the department row, its employees, and two
//! intra-partition secondary indexes (by email, by last name) whose rows are full copies of the
//! employee, so lookups are point reads and prefix scans rather than filters. Every hire,
//! termination and change commits the employee, its index rows and the department's
//! `EmployeeCount` in one transaction: a hire conditional on the department's ETag (it copies
//! the department's name and manager; retried on conflict), a termination with a patch increment
//! of -1 (no read, no conflict). The count is always exact.
//!
//! Employees also carry denormalized copies of the department's name and manager. That is the
//! guide's trade-off: a list of employees needs no second read (the normalized model would read the
//! department row, see [`DepartmentCache`] for the join in the client), but renaming a department
//! must rewrite every copy ([`Hr::rename_department`], in transactions of at most 100). Denormalize
//! what is read often and changed rarely; keep normalized what changes often.
//!
//! A transfer moves an employee to another partition, which no transaction can span. It is made
//! eventually consistent and crash-safe: a durable transfer record is written first, each later
//! step is idempotent, and [`Hr::resume_transfers`] completes any transfer interrupted at any step.

mod join;
mod transfer;

use serde::{Deserialize, Serialize};

pub use join::DepartmentCache;
pub use transfer::TransferStep;

use super::scenario_retry;
use crate::keys::compound;
use crate::{
    retry_on_conflict, Entity, Error, ErrorKind, Filter, IfMatch, Patch, Result, TableClient,
};

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
struct CountUpdate {
    #[serde(rename = "EmployeeCount")]
    employee_count: i64,
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

fn email_row(email: &str) -> String {
    compound(&["email", email])
}

fn name_row(last_name: &str, id: &str) -> String {
    compound(&["name", last_name, id])
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

    /// Creates the table if needed.
    pub async fn setup(&self) -> Result<()> {
        self.table.create_if_not_exists().await
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

    /// Hires an employee: the employee row, both index rows and the count in one transaction.
    ///
    /// # Errors
    /// `is_conflict()` if the id or the email is taken in the department.
    pub async fn hire(&self, department_id: &str, new: NewEmployee) -> Result<Employee> {
        let new = &new;
        retry_on_conflict(scenario_retry(), move || async move {
            let department = self.department(department_id).await?;
            let employee = Employee {
                id: new.id.clone(),
                first_name: new.first_name.clone(),
                last_name: new.last_name.clone(),
                email: new.email.clone(),
                department_name: department.value.name.clone(),
                manager: department.value.manager.clone(),
            };
            let mut tx = self.table.transaction(department_id);
            let count = CountUpdate {
                employee_count: department.value.employee_count + 1,
            };
            tx.merge((department_id, DEPARTMENT_ROW), &count, &department.etag)?;
            self.add_employee_rows(&mut tx, department_id, &employee)?;
            tx.commit().await?;
            Ok(employee)
        })
        .await
    }

    fn add_employee_rows(
        &self,
        tx: &mut crate::Transaction,
        department_id: &str,
        employee: &Employee,
    ) -> Result<()> {
        let person = Person::Employee(employee.clone());
        tx.insert((department_id, employee_row(&employee.id)), &person)?;
        tx.insert((department_id, email_row(&employee.email)), &person)?;
        tx.insert(
            (department_id, name_row(&employee.last_name, &employee.id)),
            &person,
        )?;
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

    /// Terminates an employee: the rows go and the count drops, in one transaction. The count
    /// drops by a patch increment, which needs no read of the department and never conflicts:
    /// only a concurrent change of the employee makes it retry.
    pub async fn terminate(&self, department_id: &str, employee_id: &str) -> Result<()> {
        retry_on_conflict(scenario_retry(), move || async move {
            let employee = self.employee(department_id, employee_id).await?;
            let mut tx = self.table.transaction(department_id);
            let one_less = Patch::new().increment("EmployeeCount", -1i64);
            tx.patch((department_id, DEPARTMENT_ROW), &one_less)?;
            tx.delete((department_id, employee_row(employee_id)), &employee.etag)?;
            tx.delete(
                (department_id, email_row(&employee.value.email)),
                IfMatch::Any,
            )?;
            tx.delete(
                (
                    department_id,
                    name_row(&employee.value.last_name, employee_id),
                ),
                IfMatch::Any,
            )?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Changes an employee's name or email; index rows move in the same transaction.
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
            let old = &current.value;
            let new = Employee {
                first_name: first_name.into(),
                last_name: last_name.into(),
                email: email.into(),
                ..old.clone()
            };
            let person = Person::Employee(new.clone());
            let mut tx = self.table.transaction(department_id);
            tx.update(
                (department_id, employee_row(employee_id)),
                &person,
                &current.etag,
            )?;
            if old.email == new.email {
                tx.update(
                    (department_id, email_row(&new.email)),
                    &person,
                    IfMatch::Any,
                )?;
            } else {
                tx.delete((department_id, email_row(&old.email)), IfMatch::Any)?;
                tx.insert((department_id, email_row(&new.email)), &person)?;
            }
            if old.last_name == new.last_name {
                tx.update(
                    (department_id, name_row(&new.last_name, employee_id)),
                    &person,
                    IfMatch::Any,
                )?;
            } else {
                tx.delete(
                    (department_id, name_row(&old.last_name, employee_id)),
                    IfMatch::Any,
                )?;
                tx.insert(
                    (department_id, name_row(&new.last_name, employee_id)),
                    &person,
                )?;
            }
            tx.commit().await?;
            Ok(new)
        })
        .await
    }

    /// The employee with this email: one point read on the email index.
    pub async fn find_by_email(
        &self,
        department_id: &str,
        email: &str,
    ) -> Result<Option<Employee>> {
        let found = self
            .table
            .get_if_exists::<Person>((department_id, email_row(email)))
            .await?;
        found
            .map(|person| into_employee(person).map(|e| e.value))
            .transpose()
    }

    /// Employees whose last name starts with `prefix`, by last name: one prefix scan of the
    /// last-name index.
    pub async fn list_by_last_name(
        &self,
        department_id: &str,
        prefix: &str,
    ) -> Result<Vec<Employee>> {
        let rows = self
            .table
            .query::<Person>()
            .partition(department_id)
            .row_key_prefix(compound(&["name", prefix]))
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
