//! The work a filter may do on one entity, bounded before it runs: the filter's worst case is
//! costed from its shape and the document bound, and charged to the request's work budget
//! (`crate::model::WorkBudget`) at parse time, whichever protocol or feature parsed it (queries,
//! counts, bulk deletes, REST `$filter`, patch and transaction conditions all parse here).
//!
//! A unit is one comparison made or one array element a lambda visits. Every array holds at most
//! [`MAX_DOCUMENT_VALUES`] values, so a lambda over a property visits at most that many elements
//! each time it runs; a lambda over its enclosing lambda's variable (`o/Items/any(i: …)` inside
//! `Orders/any(o: …)`) visits disjoint parts of the same array, so it adds at most that many per
//! run of the enclosing lambda rather than multiplying. A lambda over a property, or over an outer
//! variable, nested in another rescans its array for each element outside it: that product is
//! what the bound refuses (`A/any(x: A/any(y: …))` is 10^8 comparisons over a 10,000-element
//! array). Any filter without such a product fits: 15 comparisons under any nesting of lambdas
//! over the variables' own members cost at most about 15 × 10,000 + 14 × 10,000 units.

use super::{Expr, Property};
use crate::model::MAX_DOCUMENT_VALUES;

/// One lambda around the expression being costed.
#[derive(Clone, Copy)]
struct Around {
    /// How many times, at most, it visits any one element on one entity.
    repeats: u64,
    /// How many elements, at most, it visits on one entity in all (so how often its body runs).
    visits: u64,
}

/// The worst-case work of `expr` on one entity, in units (saturating).
pub(super) fn worst_case(expr: &Expr) -> u64 {
    cost(expr, &mut Vec::new())
}

fn cost(expr: &Expr, around: &mut Vec<Around>) -> u64 {
    let runs = around.last().map_or(1, |lambda| lambda.visits);
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => cost(a, around).saturating_add(cost(b, around)),
        Expr::Not(inner) => cost(inner, around),
        Expr::Constant(_) => 0,
        Expr::Compare { .. } => runs,
        Expr::Lambda {
            collection, body, ..
        } => {
            let repeats = match (collection, around.last()) {
                // Parts of the enclosing lambda's elements, disjoint for distinct elements: each
                // is visited as often as the element it is part of.
                (Property::Variable { up: 0, .. }, Some(enclosing)) => enclosing.repeats,
                // The same array again on every run.
                _ => runs,
            };
            let Some(body) = body else {
                // `any()` looks at one element at most.
                return runs;
            };
            let visits = repeats.saturating_mul(MAX_DOCUMENT_VALUES as u64);
            around.push(Around { repeats, visits });
            let inner = cost(body, around);
            around.pop();
            visits.saturating_add(inner)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(filter: &str) -> u64 {
        worst_case(&super::super::parser::parse(filter).unwrap())
    }

    #[test]
    fn a_lambda_costs_what_it_visits_and_its_body_each_time() {
        assert_eq!(work("A eq 1 and B eq 2"), 2);
        assert_eq!(work("A/any()"), 1);
        assert_eq!(work("A/all(x: x eq 1)"), 20_000);
        assert_eq!(work("A/any(x: x eq 1 or x eq 2)"), 30_000);
        assert_eq!(work("A/any(x: x/B/any(y: y eq 1))"), 30_000);
        assert_eq!(work("A/any(x: B/any(y: y eq 1))"), 10_000 + 100_000_000 * 2);
    }
}
