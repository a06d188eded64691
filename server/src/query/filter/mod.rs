//! Azure's `$filter` language: the expression tree, its parser and its evaluation with Azure's type
//! semantics.
//!
//! Grammar (precedence `not` > comparison > `and` > `or`, keywords lower-case as on Azure):
//! `or := and ("or" and)*`, `and := unary ("and" unary)*`, `unary := "not" unary | "(" or ")" |
//! comparison | lambda`, `comparison := operand op operand` where exactly one operand is a
//! property. Beyond Azure, for documents (OData v4): a property may be a path into a document,
//! `Address/City`, and `lambda := path "/" ("any" | "all") "(" [variable ":" or] ")"` tests an
//! array's elements, which the body names by its variable (`h`, `h/Symbol`).

mod cost;
mod eval;
mod lexer;
mod parser;

pub use eval::Record;

use crate::model::{Spend, Value, WorkBudget};

/// Most comparisons one filter may hold (Azure's limit).
pub const MAX_COMPARISONS: usize = 15;
/// Deepest nesting of parentheses and `not` one filter may hold. Real filters (at most
/// [`MAX_COMPARISONS`] comparisons) need a few levels; the bound keeps the parser, the planner and
/// evaluation (all recursive) far from the end of a thread's stack whatever a client sends.
pub const MAX_NESTING: usize = 64;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
    /// `lt`
    Lt,
    /// `le`
    Le,
}

impl CompareOp {
    /// The operator that gives the same answer with the operands swapped (`5 lt X` is `X gt 5`).
    pub fn mirrored(self) -> CompareOp {
        match self {
            CompareOp::Gt => CompareOp::Lt,
            CompareOp::Ge => CompareOp::Le,
            CompareOp::Lt => CompareOp::Gt,
            CompareOp::Le => CompareOp::Ge,
            CompareOp::Eq | CompareOp::Ne => self,
        }
    }

    /// The operator true exactly when this one is false, for totally ordered operands.
    pub fn negated(self) -> CompareOp {
        match self {
            CompareOp::Eq => CompareOp::Ne,
            CompareOp::Ne => CompareOp::Eq,
            CompareOp::Gt => CompareOp::Le,
            CompareOp::Ge => CompareOp::Lt,
            CompareOp::Lt => CompareOp::Ge,
            CompareOp::Le => CompareOp::Gt,
        }
    }
}

/// What a comparison reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    /// The PartitionKey.
    PartitionKey,
    /// The RowKey.
    RowKey,
    /// The server-set Timestamp.
    Timestamp,
    /// A custom property.
    Custom(String),
    /// A member inside a document property: `Address/City` is `Path("Address", ["City"])`.
    Path(String, Vec<String>),
    /// A lambda's variable (`up` counts the lambdas out from the innermost, 0), or a member
    /// inside it: `h/Symbol` is `Variable { up: 0, path: ["Symbol"] }`.
    Variable {
        /// Which enclosing lambda's variable.
        up: usize,
        /// The members below it.
        path: Vec<String>,
    },
}

/// Whether a lambda asks for some element or every element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantifier {
    /// `any`: some element holds (with no body: the array is not empty).
    Any,
    /// `all`: every element holds (true of an empty array).
    All,
}

/// A parsed filter expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Both hold.
    And(Box<Expr>, Box<Expr>),
    /// Either holds.
    Or(Box<Expr>, Box<Expr>),
    /// The inner expression does not hold.
    Not(Box<Expr>),
    /// `true` or `false` standing alone: every entity, or none.
    Constant(bool),
    /// `property op literal`.
    Compare {
        /// The property compared.
        property: Property,
        /// The operator.
        op: CompareOp,
        /// The constant.
        literal: Value,
    },
    /// `collection/any(x: body)` or `collection/all(x: body)`: false when the collection is not
    /// an array (missing included).
    Lambda {
        /// `any` or `all`.
        quantifier: Quantifier,
        /// The array: a property, a path, or a member of an enclosing lambda's variable.
        collection: Property,
        /// The condition on each element; `None` for `any()`.
        body: Option<Box<Expr>>,
    },
}

/// A filter that failed to parse: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// Byte offset in the filter text.
    pub offset: usize,
    /// What is wrong there.
    pub message: String,
}

impl FilterError {
    fn new(offset: usize, message: impl Into<String>) -> FilterError {
        FilterError {
            offset,
            message: message.into(),
        }
    }
}

impl Expr {
    /// Parses a filter within the default work budget ([`Expr::parse_within`]).
    pub fn parse(text: &str) -> Result<Expr, FilterError> {
        Expr::parse_within(text, &mut WorkBudget::default().spend())
    }

    /// Parses a filter and charges its worst-case work on one entity to the request's `spend`,
    /// refusing it if the request would pass its budget (`crate::model::WorkBudget`).
    pub fn parse_within(text: &str, spend: &mut Spend) -> Result<Expr, FilterError> {
        let expr = parser::parse(text)?;
        let work = cost::worst_case(&expr);
        if let Err(over) = spend.charge(work) {
            let with_others = match over.needed == work {
                true => String::new(),
                false => format!(" ({} with the request's other filters)", over.needed),
            };
            return Err(FilterError::new(
                0,
                format!(
                    "the filter is too complex: it may take {work} steps on one entity{with_others}, \
                     more than the request's work budget of {} (--work-budget); a lambda inside \
                     another that is not over the outer lambda's variable rescans its array for \
                     each outer element",
                    over.limit
                ),
            ));
        }
        Ok(expr)
    }
}

#[cfg(test)]
mod tests;
