//! The one work budget: the most evaluation steps one request may cost on one entity, whatever
//! evaluates (a filter's comparisons and the array elements its lambdas visit, for queries,
//! counts, scans, bulk deletes, REST `$filter`, and the conditions of patches and of every
//! operation of a transaction, summed over the request). Costs are known before anything runs (a
//! filter's worst case from its shape and the document bound, `query/filter/cost.rs`), so a
//! request over its budget is refused at parse time, before it takes a partition's lock or a
//! commit slot. What else runs per entity is bounded by fixed limits of its own, each far below
//! the budget: a document's 10,000 values (`MAX_DOCUMENT_VALUES`) for validation and patch
//! steps, an entity's 1,000 index entries (`MAX_INDEX_ENTRIES_PER_ENTITY`). One request's budget
//! is the server's `--work-budget`.

/// The budget when none is configured: about 5–10 ms of evaluation on one entity.
pub const DEFAULT_WORK_BUDGET: u64 = 1_000_000;

/// A request's budget of work steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkBudget {
    limit: u64,
}

impl WorkBudget {
    /// A budget of `limit` steps (at least one).
    pub fn new(limit: u64) -> WorkBudget {
        WorkBudget {
            limit: limit.max(1),
        }
    }

    /// The most steps a request may cost.
    pub fn limit(self) -> u64 {
        self.limit
    }

    /// The spending of one request, from nothing.
    pub fn spend(self) -> Spend {
        Spend {
            budget: self,
            spent: 0,
        }
    }
}

impl Default for WorkBudget {
    fn default() -> WorkBudget {
        WorkBudget::new(DEFAULT_WORK_BUDGET)
    }
}

/// What one request has been charged so far.
#[derive(Debug, Clone)]
pub struct Spend {
    budget: WorkBudget,
    spent: u64,
}

/// A charge that would take a request past its budget: nothing was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// What the request would cost with the charge.
    pub needed: u64,
    /// Its budget.
    pub limit: u64,
}

impl Spend {
    /// Charges `steps`, or refuses them if the request's total would pass its budget.
    pub fn charge(&mut self, steps: u64) -> Result<(), OverBudget> {
        let needed = self.spent.saturating_add(steps);
        if needed > self.budget.limit {
            return Err(OverBudget {
                needed,
                limit: self.budget.limit,
            });
        }
        self.spent = needed;
        Ok(())
    }

    /// The steps charged so far.
    pub fn spent(&self) -> u64 {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_to_the_budget_and_no_further() {
        let mut spend = WorkBudget::new(10).spend();
        assert_eq!(spend.charge(6), Ok(()));
        assert_eq!(spend.charge(4), Ok(()));
        assert_eq!(
            spend.charge(1),
            Err(OverBudget {
                needed: 11,
                limit: 10
            })
        );
        assert_eq!(spend.spent(), 10, "a refused charge is not kept");
        assert_eq!(spend.charge(u64::MAX).unwrap_err().needed, u64::MAX);
    }
}
