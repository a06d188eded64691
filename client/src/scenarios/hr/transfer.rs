//! Moving an employee to another department (another partition): in one transaction across
//! partitions ([`Hr::transfer`]), or, the documented pattern for stores without such
//! transactions (Azure Table's own), eventually consistent and crash-safe: a durable transfer
//! record first, then idempotent steps, and [`Hr::resume_transfers`] to finish any interrupted one
//! ([`Hr::transfer_eventually`]).

use serde::{Deserialize, Serialize};

use super::{employee_row, into_employee, transfer_row, Employee, Hr, Person, DEPARTMENT_ROW};
use crate::keys::{compound, prefix_end};
use crate::scenarios::scenario_retry;
use crate::{retry_on_conflict, Error, ErrorCode, ErrorKind, Filter, Patch, Result};

/// The durable record of a transfer in flight, kept in the source partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TransferRecord {
    #[serde(rename = "EmployeeId")]
    employee_id: String,
    #[serde(rename = "FromDepartment")]
    from_department: String,
    #[serde(rename = "ToDepartment")]
    to_department: String,
}

/// Steps of a transfer, for interrupting one on purpose ([`Hr::interrupt_transfers_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferStep {
    /// The transfer record is written in the source partition.
    Recorded,
    /// The employee (and the count) arrived in the target partition.
    Arrived,
}

impl Hr {
    /// For testing crash-safety: make every transfer stop with an error right after `step`, as if
    /// the process died there. [`Hr::resume_transfers`] must then complete it.
    pub fn interrupt_transfers_after(&mut self, step: Option<TransferStep>) {
        self.interrupt_after = step;
    }

    /// Moves an employee to another department in one transaction across the two partitions: the
    /// row leaves the source (as read: a concurrent change of the employee makes it retry), the
    /// source count drops, the row arrives in the target with the target's name and manager, and
    /// the target count grows, all at once or not at all.
    ///
    /// # Errors
    /// `is_not_found()` if the employee or the target department does not exist; `is_conflict()`
    /// if the employee's id or email is taken in the target department.
    pub async fn transfer(
        &self,
        employee_id: &str,
        from_department: &str,
        to_department: &str,
    ) -> Result<()> {
        let table = self.table.name();
        retry_on_conflict(scenario_retry(), move || async move {
            let employee = self.employee(from_department, employee_id).await?;
            let target = self.department(to_department).await?;
            let arrived = Person::Employee(Employee {
                department_name: target.value.name,
                manager: target.value.manager,
                ..employee.value
            });
            let row = employee_row(employee_id);
            let mut tx = self.table.client.transaction();
            let one_less = Patch::new().increment("EmployeeCount", -1i64);
            let one_more = Patch::new().increment("EmployeeCount", 1i64);
            tx.delete(table, (from_department, row.as_str()), &employee.etag)?;
            tx.patch(table, (from_department, DEPARTMENT_ROW), &one_less)?;
            tx.insert(table, (to_department, row.as_str()), &arrived)?;
            tx.patch(table, (to_department, DEPARTMENT_ROW), &one_more)?;
            tx.commit().await.map(drop)
        })
        .await
    }

    /// Moves an employee to another department without a transaction across partitions, as on a
    /// store that has none: three idempotent steps, record the transfer (source), arrive (target:
    /// employee rows and count), depart (source: rows, count and the record, together); an
    /// interrupted transfer is completed by [`Hr::resume_transfers`].
    pub async fn transfer_eventually(
        &self,
        employee_id: &str,
        from_department: &str,
        to_department: &str,
    ) -> Result<()> {
        let employee = self.employee(from_department, employee_id).await?;
        let record = TransferRecord {
            employee_id: employee_id.into(),
            from_department: from_department.into(),
            to_department: to_department.into(),
        };
        let mut tx = self.table.transaction(from_department);
        tx.insert((from_department, transfer_row(employee_id)), &record)?;
        tx.check_exists((from_department, employee_row(employee_id)), &employee.etag)?;
        tx.commit().await?;
        self.interrupt_if(TransferStep::Recorded)?;
        self.arrive(&record, &employee.value).await?;
        self.interrupt_if(TransferStep::Arrived)?;
        self.depart(&record).await
    }

    fn interrupt_if(&self, step: TransferStep) -> Result<()> {
        if self.interrupt_after == Some(step) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("transfer interrupted after {step:?} (test hook)"),
            ));
        }
        Ok(())
    }

    /// Adds the employee to the target department unless it is already there.
    async fn arrive(&self, record: &TransferRecord, employee: &Employee) -> Result<()> {
        let target = record.to_department.as_str();
        let department = self.department(target).await?;
        let arrived = Employee {
            department_name: department.value.name,
            manager: department.value.manager,
            ..employee.clone()
        };
        let mut tx = self.table.transaction(target);
        self.add_employee(&mut tx, target, &arrived)?;
        match tx.commit().await {
            Ok(_) => Ok(()),
            // The employee row already exists: an earlier attempt arrived.
            Err(error) if error.code() == Some(ErrorCode::EntityAlreadyExists) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Removes the employee and the transfer record from the source, and drops the source count
    /// (a patch increment), in one transaction; done already if the record is gone.
    async fn depart(&self, record: &TransferRecord) -> Result<()> {
        let source = record.from_department.as_str();
        let id = record.employee_id.as_str();
        loop {
            let Some(transfer) = self
                .table
                .get_if_exists::<crate::Properties>((source, transfer_row(id)))
                .await?
            else {
                return Ok(());
            };
            let employee = self.employee(source, id).await?;
            let mut tx = self.table.transaction(source);
            let one_less = Patch::new().increment("EmployeeCount", -1i64);
            tx.patch((source, DEPARTMENT_ROW), &one_less)?;
            tx.delete((source, employee_row(id)), &employee.etag)?;
            tx.delete((source, transfer_row(id)), &transfer.etag)?;
            match tx.commit().await {
                Ok(_) => return Ok(()),
                Err(error) if error.is_precondition_failed() || error.is_not_found() => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Completes every transfer interrupted at any step; returns how many it completed.
    pub async fn resume_transfers(&self) -> Result<usize> {
        let start = compound(&["transfer", ""]);
        let end = prefix_end(&start).expect("a non-empty prefix has an end");
        let filter = Filter::ge("RowKey", start.as_str()).and(Filter::lt("RowKey", end.as_str()));
        let records = self
            .table
            .query::<TransferRecord>()
            .filter(filter)
            .all()
            .await?;
        for record in &records {
            let record = &record.value;
            if let Some(employee) = self
                .table
                .get_if_exists::<Person>((
                    record.from_department.as_str(),
                    employee_row(&record.employee_id),
                ))
                .await?
            {
                self.arrive(record, &into_employee(employee)?.value).await?;
            }
            self.depart(record).await?;
        }
        Ok(records.len())
    }
}
