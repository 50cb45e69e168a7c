//! The acceptance check: a task completes only when its observed result passes it.

use quorate_protocols::wire::Receipt;
use quorate_protocols::{Acceptance, Check, Plan, Precondition, ResultKind};
use quorate_state::PreconditionFailure;

/// Why a reply's result does not pass its task's acceptance check: the first failing
/// observation, naming the check and what the result showed. The text (`Display`) is the
/// observation the trace and the report print.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AcceptanceFailure {
    /// The reply says nothing about what kind of result it is.
    #[error("reply has no result kind")]
    NoKind,
    /// The result's kind is not one the task accepts.
    #[error("result kind {kind} is not accepted (accepted: {})", list(accepted))]
    KindNotAccepted {
        /// The kind the reply claimed.
        kind: ResultKind,
        /// The kinds the task accepts.
        accepted: Vec<ResultKind>,
    },
    /// The result claims to be an execution receipt but carries no receipt the runtime issued.
    #[error("result claims to be an execution receipt but carries no receipt the runtime issued")]
    NoReceipt,
    /// `non-empty`: the result is empty.
    #[error("result is empty")]
    Empty,
    /// `field-present` or `field-equals`: the result has no such field.
    #[error("result has no field {field}")]
    FieldMissing {
        /// The JSON pointer.
        field: String,
    },
    /// `field-equals`: the field holds another value.
    #[error("field {field} is {found}, expected {expected}")]
    FieldMismatch {
        /// The JSON pointer.
        field: String,
        /// What the result holds there.
        found: serde_json::Value,
        /// What the check wants.
        expected: serde_json::Value,
    },
    /// `read-back-changed`: no runtime-issued receipt shows a change of the key.
    #[error("read-back of {key} shows no change")]
    NoChange {
        /// The store key.
        key: String,
    },
}

fn list(kinds: &[ResultKind]) -> String {
    kinds
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `acceptance` on a reply that claims to be `kind` with `value` and `receipts`. Returns the
/// first failing observation.
///
/// `read-back-changed` passes only if a runtime-issued receipt of a call whose parameters name
/// `key` (under `/key`) shows that the tool reported a change. A reply that merely *says* it saved
/// does not pass, and neither does a save the tool answered with "nothing changed". Likewise a
/// result that claims to be an `execution-receipt` must carry at least one receipt the runtime
/// issued: an agent's word that something ran is not proof that it did.
pub fn check(
    acceptance: &Acceptance,
    kind: Option<ResultKind>,
    value: &serde_json::Value,
    receipts: &[Receipt],
) -> Result<(), AcceptanceFailure> {
    match kind {
        Some(k) if acceptance.kinds.contains(&k) => {}
        Some(k) => {
            return Err(AcceptanceFailure::KindNotAccepted {
                kind: k,
                accepted: acceptance.kinds.clone(),
            })
        }
        None => return Err(AcceptanceFailure::NoKind),
    }
    if kind == Some(ResultKind::ExecutionReceipt) && receipts.is_empty() {
        return Err(AcceptanceFailure::NoReceipt);
    }
    for c in &acceptance.checks {
        match c {
            Check::NonEmpty => {
                if is_empty(value) {
                    return Err(AcceptanceFailure::Empty);
                }
            }
            Check::FieldPresent { field } => {
                if value.pointer(field).is_none() {
                    return Err(AcceptanceFailure::FieldMissing {
                        field: field.clone(),
                    });
                }
            }
            Check::FieldEquals { field, value: want } => match value.pointer(field) {
                Some(got) if got == want => {}
                Some(got) => {
                    return Err(AcceptanceFailure::FieldMismatch {
                        field: field.clone(),
                        found: got.clone(),
                        expected: want.clone(),
                    })
                }
                None => {
                    return Err(AcceptanceFailure::FieldMissing {
                        field: field.clone(),
                    })
                }
            },
            Check::ReadBackChanged { key } => {
                let changed = receipts.iter().any(|r| {
                    r.changed
                        && r.params.pointer("/key").and_then(|k| k.as_str()) == Some(key.as_str())
                });
                if !changed {
                    return Err(AcceptanceFailure::NoChange { key: key.clone() });
                }
            }
        }
    }
    Ok(())
}

/// Checks node `i`'s `inputs-non-empty` precondition, if it has one, on the results of its
/// dependencies (`result(d)` for dependency `d`, `None` if it has none); the star and peer cores
/// both ask here. Store-backed preconditions are the shell's to check. The failure names the
/// empty inputs.
pub(crate) fn check_inputs<'a>(
    plan: &Plan,
    i: u32,
    result: impl Fn(u32) -> Option<&'a serde_json::Value>,
) -> Result<(), PreconditionFailure> {
    let wanted = plan
        .node(i)
        .preconditions
        .iter()
        .any(|p| matches!(p, Precondition::InputsNonEmpty));
    if !wanted {
        return Ok(());
    }
    let empty: Vec<String> = plan
        .deps(i)
        .iter()
        .filter(|&&d| result(d).is_none_or(is_empty))
        .map(|&d| plan.node(d).id.to_string())
        .collect();
    if empty.is_empty() {
        Ok(())
    } else {
        Err(PreconditionFailure::EmptyInputs { from: empty })
    }
}

/// Node `i`'s preconditions that need the store (all but `inputs-non-empty`): the shell checks
/// them against the result store when the task is about to become ready.
pub(crate) fn store_checks(plan: &Plan, i: u32) -> Vec<Precondition> {
    plan.node(i)
        .preconditions
        .iter()
        .filter(|p| p.needs_store())
        .cloned()
        .collect()
}

/// `true` for null, an empty string, an empty array or an empty object: what the `non-empty`
/// check and the `inputs-non-empty` precondition refuse.
#[must_use]
pub fn is_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn suggestions_do_not_complete_by_default() {
        let a = Acceptance::default();
        let refused = check(&a, Some(ResultKind::Suggestion), &json!(1), &[]).unwrap_err();
        assert_eq!(
            refused,
            AcceptanceFailure::KindNotAccepted {
                kind: ResultKind::Suggestion,
                accepted: a.kinds.clone(),
            }
        );
        assert_eq!(
            refused.to_string(),
            "result kind suggestion is not accepted (accepted: verified-conclusion, execution-receipt)"
        );
        assert!(check(&a, Some(ResultKind::VerifiedConclusion), &json!(1), &[]).is_ok());
        assert_eq!(
            check(&a, None, &json!(1), &[]),
            Err(AcceptanceFailure::NoKind)
        );
    }

    #[test]
    fn an_execution_receipt_needs_a_receipt_the_runtime_issued() {
        let a = Acceptance::default();
        let k = Some(ResultKind::ExecutionReceipt);
        assert_eq!(
            check(&a, k, &json!("published"), &[]),
            Err(AcceptanceFailure::NoReceipt)
        );
        let receipt = Receipt {
            action: quorate_protocols::ActionId::new(quorate_protocols::TaskId::from_u128(1), 0, 0),
            tool: "report.publish".into(),
            digest: quorate_protocols::ParamDigest::of(&json!({})),
            params: json!({}),
            output: json!("ok"),
            changed: true,
        };
        assert_eq!(check(&a, k, &json!("published"), &[receipt]), Ok(()));
    }

    #[test]
    fn checks_name_the_failure() {
        let a = Acceptance {
            checks: vec![
                Check::NonEmpty,
                Check::FieldEquals {
                    field: "/count".into(),
                    value: json!(3),
                },
            ],
            ..Acceptance::default()
        };
        let k = Some(ResultKind::VerifiedConclusion);
        assert_eq!(check(&a, k, &json!({}), &[]), Err(AcceptanceFailure::Empty));
        let mismatch = check(&a, k, &json!({"count": 2}), &[]).unwrap_err();
        assert_eq!(
            mismatch,
            AcceptanceFailure::FieldMismatch {
                field: "/count".into(),
                found: json!(2),
                expected: json!(3),
            }
        );
        assert_eq!(mismatch.to_string(), "field /count is 2, expected 3");
        assert!(check(&a, k, &json!({"count": 3}), &[]).is_ok());
    }
}
