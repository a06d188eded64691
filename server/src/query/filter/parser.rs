//! Recursive-descent parser from tokens to [`Expr`].

use super::lexer::{tokenize, Spanned, Token};
use super::{CompareOp, Expr, FilterError, Property, Quantifier, MAX_COMPARISONS, MAX_NESTING};
use crate::model::{quoted, Value};

/// Words that cannot be property names.
const KEYWORDS: &[&str] = &[
    "and", "or", "not", "eq", "ne", "gt", "ge", "lt", "le", "true", "false", "null",
];

/// The comparison operators.
const OPERATORS: &[&str] = &["eq", "ne", "gt", "ge", "lt", "le"];

/// The boolean literal `word` is, in any case (`true`, `True`, `FALSE`), as Azure's service and
/// emulator read it.
fn boolean(word: &str) -> Option<bool> {
    match word {
        _ if word.eq_ignore_ascii_case("true") => Some(true),
        _ if word.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

pub(super) fn parse(text: &str) -> Result<Expr, FilterError> {
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Err(FilterError::new(0, "the filter is empty"));
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        end: text.len(),
        comparisons: 0,
        nesting: 0,
        variables: Vec::new(),
    };
    let expr = parser.or()?;
    match parser.tokens.get(parser.pos) {
        None => Ok(expr),
        Some(Spanned {
            token: Token::RightParen,
            offset,
        }) => Err(FilterError::new(*offset, "')' without a matching '('")),
        Some(Spanned { offset, .. }) => Err(FilterError::new(
            *offset,
            "expected 'and', 'or' or the end of the filter",
        )),
    }
}

struct Parser {
    tokens: Vec<Spanned>,
    pos: usize,
    end: usize,
    comparisons: usize,
    /// Open `(` and `not` around the current token: bounded, so that neither this parser nor
    /// anything recursing over the tree it builds can run out of stack.
    nesting: usize,
    /// The variables of the lambdas around the current token, innermost last.
    variables: Vec<String>,
}

impl Parser {
    fn peek(&self) -> Option<&Spanned> {
        self.tokens.get(self.pos)
    }

    fn offset(&self) -> usize {
        self.peek().map_or(self.end, |t| t.offset)
    }

    fn at(&self, token: &Token) -> bool {
        self.peek().is_some_and(|t| t.token == *token)
    }

    fn at_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Spanned { token: Token::Word(w), .. }) if w == word)
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        self.chain("or", Parser::and, Expr::Or)
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        self.chain("and", Parser::unary, Expr::And)
    }

    /// `operand (word operand)*`, combined left to right.
    fn chain(
        &mut self,
        word: &str,
        operand: fn(&mut Parser) -> Result<Expr, FilterError>,
        combine: fn(Box<Expr>, Box<Expr>) -> Expr,
    ) -> Result<Expr, FilterError> {
        let mut left = operand(self)?;
        while self.at_word(word) {
            self.pos += 1;
            left = combine(Box::new(left), Box::new(operand(self)?));
        }
        Ok(left)
    }

    /// Enters one more level of `(` or `not`, refusing filters nested past [`MAX_NESTING`].
    fn nest(&mut self) -> Result<(), FilterError> {
        if self.nesting == MAX_NESTING {
            return Err(FilterError::new(
                self.offset(),
                format!("a filter may nest parentheses and 'not' at most {MAX_NESTING} deep"),
            ));
        }
        self.nesting += 1;
        self.pos += 1;
        Ok(())
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        if self.at_word("not") {
            self.nest()?;
            let inner = self.unary()?;
            self.nesting -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if let Some(Spanned {
            token: Token::LeftParen,
            offset,
        }) = self.peek()
        {
            let open = *offset;
            self.nest()?;
            let inner = self.or()?;
            self.nesting -= 1;
            return match self.peek() {
                Some(Spanned {
                    token: Token::RightParen,
                    ..
                }) => {
                    self.pos += 1;
                    Ok(inner)
                }
                _ => Err(FilterError::new(open, "'(' is never closed")),
            };
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, FilterError> {
        let start = self.offset();
        if let Some(value) = self.lone_boolean() {
            self.pos += 1;
            self.count_comparison(start)?;
            return Ok(Expr::Constant(value));
        }
        let left = self.operand()?;
        if let Operand::Lambda(lambda) = left {
            self.count_comparison(start)?;
            return Ok(lambda);
        }
        let op = self.operator()?;
        let right = self.operand()?;
        self.count_comparison(start)?;
        match (left, right) {
            (Operand::Property(property), Operand::Literal(literal)) => Ok(Expr::Compare {
                property,
                op,
                literal,
            }),
            (Operand::Literal(literal), Operand::Property(property)) => Ok(Expr::Compare {
                property,
                op: op.mirrored(),
                literal,
            }),
            (_, Operand::Lambda(_)) => Err(FilterError::new(
                start,
                "'any' and 'all' are conditions, not values to compare",
            )),
            (Operand::Property(_), Operand::Property(_)) => Err(FilterError::new(
                start,
                "one side of a comparison must be a constant",
            )),
            (Operand::Literal(_), Operand::Literal(_)) | (Operand::Lambda(_), _) => Err(
                FilterError::new(start, "one side of a comparison must be a property"),
            ),
        }
    }

    /// Counts one more comparison (a constant counts as one), refusing filters past
    /// [`MAX_COMPARISONS`].
    fn count_comparison(&mut self, start: usize) -> Result<(), FilterError> {
        self.comparisons += 1;
        if self.comparisons > MAX_COMPARISONS {
            return Err(FilterError::new(
                start,
                format!("a filter may hold at most {MAX_COMPARISONS} comparisons"),
            ));
        }
        Ok(())
    }

    /// The value of a `true` or `false` that stands alone as a condition (no comparison operator
    /// follows it), as in `$filter=true`.
    fn lone_boolean(&self) -> Option<bool> {
        let Some(Spanned {
            token: Token::Word(word),
            ..
        }) = self.peek()
        else {
            return None;
        };
        let value = boolean(word)?;
        let compared = matches!(
            self.tokens.get(self.pos + 1),
            Some(Spanned { token: Token::Word(next), .. }) if OPERATORS.contains(&next.as_str())
        );
        (!compared).then_some(value)
    }

    fn operand(&mut self) -> Result<Operand, FilterError> {
        let offset = self.offset();
        let Some(Spanned { token, .. }) = self.peek().cloned() else {
            return Err(FilterError::new(
                offset,
                "expected a property or a value, found the end of the filter",
            ));
        };
        self.pos += 1;
        match token {
            Token::Literal(value) => Ok(Operand::Literal(value)),
            Token::Word(word) if boolean(&word).is_some() => {
                Ok(Operand::Literal(Value::Bool(boolean(&word) == Some(true))))
            }
            Token::Word(word) => match word.as_str() {
                "null" => Err(FilterError::new(offset, "null is not allowed in a filter")),
                keyword if KEYWORDS.contains(&keyword) => Err(FilterError::new(
                    offset,
                    format!("expected a property or a value, found {}", quoted(keyword)),
                )),
                _ => self.path(word, offset),
            },
            Token::LeftParen | Token::RightParen | Token::Slash | Token::Colon => {
                Err(FilterError::new(offset, "expected a property or a value"))
            }
        }
    }

    /// A property, a path from it (`Address/City`, `Variants/0/Stock`), or a lambda over one
    /// (`Tags/any(t: …)`);
    /// `first` (at `offset`) was just read.
    fn path(&mut self, first: String, offset: usize) -> Result<Operand, FilterError> {
        let mut steps = Vec::new();
        while self.at(&Token::Slash) {
            self.pos += 1;
            let step_offset = self.offset();
            let step = match self.peek() {
                Some(Spanned {
                    token: Token::Word(step),
                    ..
                }) if !KEYWORDS.contains(&step.as_str()) => step.clone(),
                // A position in an array (`Variants/0/Stock`), as patches take it; in an object,
                // the member of that name.
                Some(Spanned {
                    token: Token::Literal(Value::Int32(position)),
                    ..
                }) => match *position >= 0 {
                    true => position.to_string(),
                    false => {
                        return Err(FilterError::new(
                            step_offset,
                            "a position in an array counts from 0 at its start; negative \
                             positions are not taken",
                        ))
                    }
                },
                _ => {
                    return Err(FilterError::new(
                        step_offset,
                        "expected a member name or an array position after '/'",
                    ))
                }
            };
            self.pos += 1;
            if matches!(step.as_str(), "any" | "all") && self.at(&Token::LeftParen) {
                let collection = self.property(first, steps, offset)?;
                return self.lambda(&step, collection).map(Operand::Lambda);
            }
            steps.push(step);
        }
        if matches!(first.as_str(), "any" | "all") && self.at(&Token::LeftParen) {
            return Err(FilterError::new(
                offset,
                format!(
                    "{} applies to an array: write Tags/{first}(t: t eq 'x')",
                    quoted(&first)
                ),
            ));
        }
        self.property(first, steps, offset).map(Operand::Property)
    }

    /// What `first/steps…` names: a lambda's variable (or a member of it), a system property, a
    /// custom property or a path into one.
    fn property(
        &self,
        first: String,
        steps: Vec<String>,
        offset: usize,
    ) -> Result<Property, FilterError> {
        if let Some(up) = self.variables.iter().rev().position(|v| *v == first) {
            return Ok(Property::Variable { up, path: steps });
        }
        let system = match first.as_str() {
            "PartitionKey" => Some(Property::PartitionKey),
            "RowKey" => Some(Property::RowKey),
            "Timestamp" => Some(Property::Timestamp),
            _ => None,
        };
        match (system, steps.is_empty()) {
            (Some(property), true) => Ok(property),
            (Some(_), false) => Err(FilterError::new(
                offset,
                format!("{} has no members", quoted(&first)),
            )),
            (None, true) => Ok(Property::Custom(first)),
            (None, false) => Ok(Property::Path(first, steps)),
        }
    }

    /// `any(…)` or `all(…)` over `collection`, the parser at its `(`.
    fn lambda(&mut self, word: &str, collection: Property) -> Result<Expr, FilterError> {
        let open = self.offset();
        let quantifier = match word {
            "any" => Quantifier::Any,
            _ => Quantifier::All,
        };
        self.nest()?;
        let body = if self.at(&Token::RightParen) && quantifier == Quantifier::Any {
            None
        } else {
            let variable_offset = self.offset();
            let variable = match self.peek().cloned() {
                Some(Spanned {
                    token: Token::Word(word),
                    ..
                }) if !KEYWORDS.contains(&word.as_str()) => word,
                _ => {
                    return Err(FilterError::new(
                        variable_offset,
                        format!("expected a variable, as in {word}(x: x eq 1)"),
                    ))
                }
            };
            self.pos += 1;
            if !self.at(&Token::Colon) {
                return Err(FilterError::new(
                    self.offset(),
                    "expected ':' after the variable",
                ));
            }
            self.pos += 1;
            self.variables.push(variable);
            let body = self.or()?;
            self.variables.pop();
            Some(Box::new(body))
        };
        if !self.at(&Token::RightParen) {
            return Err(FilterError::new(open, "'(' is never closed"));
        }
        self.pos += 1;
        self.nesting -= 1;
        Ok(Expr::Lambda {
            quantifier,
            collection,
            body,
        })
    }

    fn operator(&mut self) -> Result<CompareOp, FilterError> {
        let offset = self.offset();
        let op = match self.peek() {
            Some(Spanned {
                token: Token::Word(word),
                ..
            }) => match word.as_str() {
                "eq" => Some(CompareOp::Eq),
                "ne" => Some(CompareOp::Ne),
                "gt" => Some(CompareOp::Gt),
                "ge" => Some(CompareOp::Ge),
                "lt" => Some(CompareOp::Lt),
                "le" => Some(CompareOp::Le),
                _ => None,
            },
            _ => None,
        };
        let op = op.ok_or_else(|| {
            FilterError::new(
                offset,
                "expected a comparison operator (eq, ne, gt, ge, lt, le)",
            )
        })?;
        self.pos += 1;
        Ok(op)
    }
}

enum Operand {
    Property(Property),
    Literal(Value),
    /// `any`/`all`: a condition of its own.
    Lambda(Expr),
}
