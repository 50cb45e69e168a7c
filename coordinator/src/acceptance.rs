//! The acceptance check: a task completes only when its observed result passes it.

use quorate_protocols::wire::Receipt;
use quorate_protocols::{Acceptance, Check, Plan, Precondition, ResultKind};

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
) -> Result<(), String> {
    match kind {
        Some(k) if acceptance.kinds.contains(&k) => {}
        Some(k) => {
            return Err(format!(
                "result kind {k} is not accepted (accepted: {})",
                acceptance
                    .kinds
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
        None => return Err("reply has no result kind".to_string()),
    }
    if kind == Some(ResultKind::ExecutionReceipt) && receipts.is_empty() {
        return Err(
            "result claims to be an execution receipt but carries no receipt the runtime issued"
                .to_string(),
        );
    }
    for c in &acceptance.checks {
        match c {
            Check::NonEmpty => {
                if is_empty(value) {
                    return Err("result is empty".to_string());
                }
            }
            Check::FieldPresent { field } => {
                if value.pointer(field).is_none() {
                    return Err(format!("result has no field {field}"));
                }
            }
            Check::FieldEquals { field, value: want } => match value.pointer(field) {
                Some(got) if got == want => {}
                Some(got) => return Err(format!("field {field} is {got}, expected {want}")),
                None => return Err(format!("result has no field {field}")),
            },
            Check::ReadBackChanged { key } => {
                let changed = receipts.iter().any(|r| {
                    r.changed
                        && r.params.pointer("/key").and_then(|k| k.as_str()) == Some(key.as_str())
                });
                if !changed {
                    return Err(format!("read-back of {key} shows no change"));
                }
            }
        }
    }
    Ok(())
}

/// Checks node `i`'s `inputs-non-empty` precondition, if it has one, on the results of its
/// dependencies (`result(d)` for dependency `d`, `None` if it has none); the star and peer cores
/// both ask here. Store-backed preconditions are the shell's to check. The observation names the
/// empty inputs.
pub(crate) fn check_inputs<'a>(
    plan: &Plan,
    i: u32,
    result: impl Fn(u32) -> Option<&'a serde_json::Value>,
) -> Result<(), String> {
    let wanted = plan
        .node(i)
        .preconditions
        .iter()
        .any(|p| matches!(p, Precondition::InputsNonEmpty));
    if !wanted {
        return Ok(());
    }
    let empty: Vec<&str> = plan
        .deps(i)
        .iter()
        .filter(|&&d| result(d).is_none_or(is_empty))
        .map(|&d| plan.node(d).id.as_str())
        .collect();
    if empty.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "precondition does not hold: empty input from {}",
            empty.join(", ")
        ))
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
        assert!(check(&a, Some(ResultKind::Suggestion), &json!(1), &[]).is_err());
        assert!(check(&a, Some(ResultKind::VerifiedConclusion), &json!(1), &[]).is_ok());
        assert!(check(&a, None, &json!(1), &[]).is_err());
    }

    #[test]
    fn an_execution_receipt_needs_a_receipt_the_runtime_issued() {
        let a = Acceptance::default();
        let k = Some(ResultKind::ExecutionReceipt);
        assert_eq!(
            check(&a, k, &json!("published"), &[]),
            Err(
                "result claims to be an execution receipt but carries no receipt the runtime issued"
                    .into()
            )
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
        assert_eq!(check(&a, k, &json!({}), &[]), Err("result is empty".into()));
        assert_eq!(
            check(&a, k, &json!({"count": 2}), &[]),
            Err("field /count is 2, expected 3".into())
        );
        assert!(check(&a, k, &json!({"count": 3}), &[]).is_ok());
    }
}
