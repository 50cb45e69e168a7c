//! The budget vector and its checked arithmetic.
//!
//! A [`Budget`] has four independent components. Every operation is checked per component:
//! overflow and underflow are [`BudgetError`]s, never a wrap and never a panic, so budgets near
//! `u64::MAX` are as safe as small ones.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One component of a [`Budget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Loop iterations; every iteration of an agent loop spends at least one.
    Steps,
    /// Tool calls that passed the execution gate.
    ToolCalls,
    /// Model tokens (prompt + completion).
    Tokens,
    /// Money, in the smallest unit the deployment counts (for example micro-dollars).
    Cost,
}

impl Component {
    /// All components, in field order.
    pub const ALL: [Component; 4] = [
        Component::Steps,
        Component::ToolCalls,
        Component::Tokens,
        Component::Cost,
    ];
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Component::Steps => "steps",
            Component::ToolCalls => "tool_calls",
            Component::Tokens => "tokens",
            Component::Cost => "cost",
        })
    }
}

/// A budget: steps, tool calls, tokens and cost. Each component is a plain `u64`.
///
/// ```
/// use quorate_protocols::{Budget, BudgetError, Component};
///
/// let parent = Budget::new(10, 4, 1_000, 50);
/// let child = Budget::new(3, 1, 400, 20);
/// assert!(child.fits_within(&parent));
/// let left = parent.checked_sub(&child)?;
/// assert_eq!(left, Budget::new(7, 3, 600, 30));
///
/// // Taking more than there is names the component instead of wrapping around.
/// let err = child.checked_sub(&parent).unwrap_err();
/// assert_eq!(err, BudgetError::Underflow { component: Component::Steps, have: 3, take: 10 });
/// # Ok::<(), BudgetError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// Loop iterations.
    pub steps: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Model tokens.
    pub tokens: u64,
    /// Cost in the deployment's smallest money unit.
    pub cost: u64,
}

/// Checked budget arithmetic failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `left + right` does not fit in a `u64` for `component`. Retrying cannot help.
    #[error("budget overflow in {component}: {left} + {right} exceeds u64::MAX")]
    Overflow {
        /// The component that overflowed.
        component: Component,
        /// The left operand.
        left: u64,
        /// The right operand.
        right: u64,
    },
    /// `have - take` would go below zero for `component`.
    #[error("budget underflow in {component}: cannot take {take} from {have}")]
    Underflow {
        /// The component that would go negative.
        component: Component,
        /// What there is.
        have: u64,
        /// What was asked for.
        take: u64,
    },
}

impl Budget {
    /// The empty budget.
    pub const ZERO: Budget = Budget::new(0, 0, 0, 0);

    /// A budget from its four components.
    #[must_use]
    pub const fn new(steps: u64, tool_calls: u64, tokens: u64, cost: u64) -> Self {
        Self {
            steps,
            tool_calls,
            tokens,
            cost,
        }
    }

    /// A budget of `steps` steps and nothing else.
    #[must_use]
    pub const fn steps(steps: u64) -> Self {
        Self::new(steps, 0, 0, 0)
    }

    /// The value of one component.
    #[must_use]
    pub const fn get(&self, component: Component) -> u64 {
        match component {
            Component::Steps => self.steps,
            Component::ToolCalls => self.tool_calls,
            Component::Tokens => self.tokens,
            Component::Cost => self.cost,
        }
    }

    fn zip(
        &self,
        other: &Budget,
        mut op: impl FnMut(Component, u64, u64) -> Result<u64, BudgetError>,
    ) -> Result<Budget, BudgetError> {
        Ok(Budget {
            steps: op(Component::Steps, self.steps, other.steps)?,
            tool_calls: op(Component::ToolCalls, self.tool_calls, other.tool_calls)?,
            tokens: op(Component::Tokens, self.tokens, other.tokens)?,
            cost: op(Component::Cost, self.cost, other.cost)?,
        })
    }

    /// Component-wise sum; [`BudgetError::Overflow`] names the first component that overflows.
    pub fn checked_add(&self, other: &Budget) -> Result<Budget, BudgetError> {
        self.zip(other, |component, left, right| {
            left.checked_add(right).ok_or(BudgetError::Overflow {
                component,
                left,
                right,
            })
        })
    }

    /// Component-wise difference; [`BudgetError::Underflow`] names the first component that
    /// would go negative.
    pub fn checked_sub(&self, other: &Budget) -> Result<Budget, BudgetError> {
        self.zip(other, |component, have, take| {
            have.checked_sub(take).ok_or(BudgetError::Underflow {
                component,
                have,
                take,
            })
        })
    }

    /// Component-wise difference clamped at zero (for reporting what is left, never for
    /// accounting).
    #[must_use]
    pub fn saturating_sub(&self, other: &Budget) -> Budget {
        Budget {
            steps: self.steps.saturating_sub(other.steps),
            tool_calls: self.tool_calls.saturating_sub(other.tool_calls),
            tokens: self.tokens.saturating_sub(other.tokens),
            cost: self.cost.saturating_sub(other.cost),
        }
    }

    /// Component-wise sum clamped at `u64::MAX` (for statistics, never for accounting).
    #[must_use]
    pub fn saturating_add(&self, other: &Budget) -> Budget {
        Budget {
            steps: self.steps.saturating_add(other.steps),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
            tokens: self.tokens.saturating_add(other.tokens),
            cost: self.cost.saturating_add(other.cost),
        }
    }

    /// Component-wise minimum.
    #[must_use]
    pub fn min(&self, other: &Budget) -> Budget {
        Budget {
            steps: self.steps.min(other.steps),
            tool_calls: self.tool_calls.min(other.tool_calls),
            tokens: self.tokens.min(other.tokens),
            cost: self.cost.min(other.cost),
        }
    }

    /// Sum of many budgets, checked.
    pub fn checked_sum<'a>(
        budgets: impl IntoIterator<Item = &'a Budget>,
    ) -> Result<Budget, BudgetError> {
        budgets
            .into_iter()
            .try_fold(Budget::ZERO, |acc, b| acc.checked_add(b))
    }

    /// `true` when every component of `self` is `<=` the same component of `limit`.
    #[must_use]
    pub fn fits_within(&self, limit: &Budget) -> bool {
        self.first_excess(limit).is_none()
    }

    /// The first component in which `self` exceeds `limit`, if any.
    #[must_use]
    pub fn first_excess(&self, limit: &Budget) -> Option<Component> {
        Component::ALL
            .into_iter()
            .find(|&c| self.get(c) > limit.get(c))
    }

    /// `true` when every component is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        *self == Budget::ZERO
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{steps: {}, tool_calls: {}, tokens: {}, cost: {}}}",
            self.steps, self.tool_calls, self.tokens, self.cost
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn overflow_names_component_and_operands() {
        let a = Budget::new(1, u64::MAX, 0, 0);
        let b = Budget::new(1, 1, 0, 0);
        assert_eq!(
            a.checked_add(&b),
            Err(BudgetError::Overflow {
                component: Component::ToolCalls,
                left: u64::MAX,
                right: 1
            })
        );
    }

    #[test]
    fn first_excess_finds_the_component() {
        let limit = Budget::new(5, 5, 5, 5);
        assert_eq!(
            Budget::new(5, 5, 6, 0).first_excess(&limit),
            Some(Component::Tokens)
        );
        assert_eq!(Budget::new(5, 5, 5, 5).first_excess(&limit), None);
    }

    fn budget() -> impl Strategy<Value = Budget> {
        let c = prop_oneof![0u64..1000, (u64::MAX - 1000)..=u64::MAX, any::<u64>()];
        (c.clone(), c.clone(), c.clone(), c).prop_map(|(a, b, t, d)| Budget::new(a, b, t, d))
    }

    proptest! {
        #[test]
        fn add_then_sub_round_trips_or_errors(a in budget(), b in budget()) {
            match a.checked_add(&b) {
                Ok(sum) => {
                    prop_assert!(a.fits_within(&sum) && b.fits_within(&sum));
                    prop_assert_eq!(sum.checked_sub(&b).unwrap(), a);
                }
                Err(BudgetError::Overflow { component, left, right }) => {
                    prop_assert_eq!(left, a.get(component));
                    prop_assert_eq!(right, b.get(component));
                    prop_assert!(left.checked_add(right).is_none());
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        #[test]
        fn sub_succeeds_exactly_when_it_fits(a in budget(), b in budget()) {
            prop_assert_eq!(a.checked_sub(&b).is_ok(), b.fits_within(&a));
        }

        /// The operations agree with a component-by-component reference, including which
        /// component an error names (the first in `Component::ALL` order).
        #[test]
        fn operations_match_the_component_by_component_rule(a in budget(), b in budget()) {
            let first = |ok: fn(u64, u64) -> bool| {
                Component::ALL.into_iter().find(|&c| !ok(a.get(c), b.get(c)))
            };
            match (a.checked_add(&b), first(|x, y| x.checked_add(y).is_some())) {
                (Ok(sum), None) => {
                    for c in Component::ALL {
                        prop_assert_eq!(sum.get(c), a.get(c) + b.get(c));
                    }
                }
                (Err(BudgetError::Overflow { component, .. }), Some(c)) => {
                    prop_assert_eq!(component, c);
                }
                (got, want) => prop_assert!(false, "add: {got:?} vs first overflow {want:?}"),
            }
            match (a.checked_sub(&b), first(|x, y| x >= y)) {
                (Ok(diff), None) => {
                    for c in Component::ALL {
                        prop_assert_eq!(diff.get(c), a.get(c) - b.get(c));
                    }
                }
                (Err(BudgetError::Underflow { component, .. }), Some(c)) => {
                    prop_assert_eq!(component, c);
                }
                (got, want) => prop_assert!(false, "sub: {got:?} vs first underflow {want:?}"),
            }
            prop_assert_eq!(a.first_excess(&b), first(|x, y| x <= y));
        }
    }
}
