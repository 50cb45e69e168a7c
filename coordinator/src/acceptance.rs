//! The acceptance check: a task completes only when its observed result passes it.
//!
//! An answer first gets the kind it is taken as ([`taken_kind`]): a verified conclusion whose
//! citations do not resolve to what the runtime recorded for the attempt is a suggestion. Then
//! the task's acceptance runs on that kind ([`check`]); [`check_answer`] does both, and both
//! topologies call it.

use quorate_protocols::wire::{CallEvent, Receipt};
use quorate_protocols::{Acceptance, ActionId, Check, EvidenceRef, Plan, Precondition, ResultKind};
use quorate_state::PreconditionFailure;

/// Why a reply that claims to be a verified conclusion is taken as a suggestion: its citations
/// (the envelope's `evidence`) do not resolve to what the runtime recorded for the attempt.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CitationFailure {
    /// The reply cites nothing.
    #[error("it cites nothing the runtime recorded")]
    Uncited,
    /// The reply cites something the record of the attempt does not hold: a call that did not
    /// answer (or answered with an error) in this attempt, a node that is not one of the task's
    /// dependencies, or a record none of its inputs rested on.
    #[error("it cites {cited}, which the runtime did not record for this attempt")]
    Unrecorded {
        /// The first citation that does not resolve.
        cited: EvidenceRef,
    },
}

/// What the runtime recorded for a task's attempt, as the supervisor (or the peer) saw it: the
/// citations of a verified conclusion must resolve to it.
#[derive(Clone, Copy, Debug)]
pub struct AttemptRecord<'a> {
    /// Actions whose outputs the attempt's earlier replies put on record (see
    /// [`CallEvent::recorded_output`]): the calls before an approval request, say.
    pub earlier: &'a [ActionId],
    /// The call events of the reply being judged.
    pub calls: &'a [CallEvent],
    /// The plan, and the task's node in it: its dependencies are its inputs.
    pub plan: &'a Plan,
    /// The task's node.
    pub node: u32,
}

impl AttemptRecord<'_> {
    /// Whether `cited` resolves: an [`EvidenceRef::Action`] to a call whose output the
    /// attempt's call events put on record (in this reply or an earlier one of the attempt); an
    /// [`EvidenceRef::Input`] to one of the task's dependencies; any citation to one a
    /// dependency's accepted result rested on (`inherited(d)` gives dependency `d`'s).
    pub fn holds<'e>(
        &self,
        cited: &EvidenceRef,
        inherited: impl Fn(u32) -> &'e [EvidenceRef],
    ) -> bool {
        let own = match cited {
            EvidenceRef::Action { action } => {
                self.earlier.contains(action)
                    || self
                        .calls
                        .iter()
                        .any(|c| c.recorded_output() == Some(*action))
            }
            EvidenceRef::Input { node } => self
                .plan
                .deps(self.node)
                .iter()
                .any(|&d| self.plan.node(d).id == *node),
            EvidenceRef::Record { .. } => false,
        };
        own || self
            .plan
            .deps(self.node)
            .iter()
            .any(|&d| inherited(d).contains(cited))
    }
}

/// The kind a reply that claims `kind` and cites `evidence` is taken as: a
/// [`ResultKind::VerifiedConclusion`] stays one only if it cites something and every citation
/// resolves (`resolves`); otherwise it is a [`ResultKind::Suggestion`], and the reason comes
/// with it. Other kinds are taken as they are (an execution receipt is checked against the
/// receipts by [`check`]).
pub fn taken_kind(
    kind: Option<ResultKind>,
    evidence: &[EvidenceRef],
    resolves: impl Fn(&EvidenceRef) -> bool,
) -> (Option<ResultKind>, Option<CitationFailure>) {
    if kind != Some(ResultKind::VerifiedConclusion) {
        return (kind, None);
    }
    #[cfg(feature = "mutants")]
    if quorate_protocols::mutant::is(quorate_protocols::mutant::Mutant::AcceptsUncitedConclusion) {
        return (kind, None);
    }
    let failure = match evidence.iter().find(|e| !resolves(e)) {
        _ if evidence.is_empty() => CitationFailure::Uncited,
        Some(cited) => CitationFailure::Unrecorded {
            cited: cited.clone(),
        },
        None => return (kind, None),
    };
    (Some(ResultKind::Suggestion), Some(failure))
}

/// What acceptance made of an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// Why a claimed verified conclusion was taken as a suggestion, if it was (logged as
    /// `conclusion-downgraded` whatever the verdict).
    pub downgraded: Option<CitationFailure>,
    /// The task's acceptance on the kind the answer was taken as.
    pub verdict: Result<(), AcceptanceFailure>,
}

/// [`taken_kind`], then [`check`] on the kind taken. A downgraded conclusion that the task's
/// acceptance then refuses for its kind fails with [`AcceptanceFailure::Unverified`], which
/// names the citation; one it accepts (its `kinds` take suggestions) completes as a suggestion.
pub fn check_answer(
    acceptance: &Acceptance,
    kind: Option<ResultKind>,
    evidence: &[EvidenceRef],
    resolves: impl Fn(&EvidenceRef) -> bool,
    value: &serde_json::Value,
    receipts: &[Receipt],
) -> Judged {
    let (taken, downgraded) = taken_kind(kind, evidence, resolves);
    let verdict = match (check(acceptance, taken, value, receipts), &downgraded) {
        (Err(AcceptanceFailure::KindNotAccepted { accepted, .. }), Some(reason)) => {
            Err(AcceptanceFailure::Unverified {
                reason: reason.clone(),
                accepted,
            })
        }
        (verdict, _) => verdict,
    };
    Judged {
        downgraded,
        verdict,
    }
}

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
    /// The result claims to be a verified conclusion, but its citations do not resolve to what
    /// the runtime recorded for the attempt ([`CitationFailure`]): it is a suggestion, and the
    /// task does not accept suggestions.
    #[error(
        "verified-conclusion taken as a suggestion, which is not accepted (accepted: {}): {reason}",
        list(accepted)
    )]
    Unverified {
        /// Why it was taken as a suggestion.
        reason: CitationFailure,
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
    let all = &plan.node(i).preconditions;
    if all.is_empty() {
        // Most nodes have none: every dispatch comes here.
        return Vec::new();
    }
    all.iter().filter(|p| p.needs_store()).cloned().collect()
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
            params: json!({}).into(),
            output: json!("ok").into(),
            changed: true,
        };
        assert_eq!(check(&a, k, &json!("published"), &[receipt]), Ok(()));
    }

    /// A plan `a -> b`; the record of `b`'s attempt holds one call answered without an error,
    /// one answered with an error, and one recovered in an earlier reply.
    fn cited(evidence: &[EvidenceRef], kinds: Vec<ResultKind>) -> Judged {
        use quorate_protocols::{Budget, NodeSpec, PlanSpec, TaskId};
        let plan = PlanSpec {
            budget: Budget::steps(10),
            reserve: Budget::ZERO,
            nodes: vec![
                NodeSpec::named("a").with_budget(Budget::steps(2)),
                NodeSpec::named("b")
                    .after(&["a"])
                    .with_budget(Budget::steps(2)),
            ],
            ..PlanSpec::default()
        }
        .validate()
        .expect("a valid plan");
        let task = TaskId::from_u128(2);
        let calls = [
            CallEvent::CallAnswered {
                action: ActionId::new(task, 0, 0),
                changed: false,
                cost: Budget::ZERO,
                error: None,
                model: None,
            },
            CallEvent::CallAnswered {
                action: ActionId::new(task, 1, 0),
                changed: false,
                cost: Budget::ZERO,
                error: Some("io".into()),
                model: None,
            },
        ];
        let earlier = [ActionId::new(task, 2, 0)];
        let record = AttemptRecord {
            earlier: &earlier,
            calls: &calls,
            plan: &plan,
            node: 1,
        };
        let a_rested_on = [EvidenceRef::Record {
            key: "doc/1".into(),
            version: quorate_protocols::Version::new(3),
        }];
        let inherited = |d: u32| if d == 0 { &a_rested_on[..] } else { &[][..] };
        let acceptance = Acceptance {
            kinds,
            ..Acceptance::default()
        };
        check_answer(
            &acceptance,
            Some(ResultKind::VerifiedConclusion),
            evidence,
            |e| record.holds(e, inherited),
            &json!("done"),
            &[],
        )
    }

    #[test]
    fn a_verified_conclusion_must_cite_what_the_attempt_recorded() {
        use quorate_protocols::{NodeId, TaskId};
        let task = TaskId::from_u128(2);
        let action = |step| EvidenceRef::Action {
            action: ActionId::new(task, step, 0),
        };
        let default = Acceptance::default().kinds;
        // Resolves: an answered call, one recovered in an earlier reply, the input, and what
        // the input rested on.
        let input = EvidenceRef::Input {
            node: NodeId::new("a").unwrap(),
        };
        let inherited = EvidenceRef::Record {
            key: "doc/1".into(),
            version: quorate_protocols::Version::new(3),
        };
        let good = [action(0), action(2), input, inherited];
        for cite in &good {
            let judged = cited(std::slice::from_ref(cite), default.clone());
            assert_eq!(judged.downgraded, None, "{cite}");
            assert_eq!(judged.verdict, Ok(()), "{cite}");
        }
        // Nothing cited: a suggestion, which the default kinds refuse, naming why.
        let uncited = cited(&[], default.clone());
        assert_eq!(uncited.downgraded, Some(CitationFailure::Uncited));
        let refused = uncited.verdict.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "verified-conclusion taken as a suggestion, which is not accepted \
             (accepted: verified-conclusion, execution-receipt): it cites nothing the runtime recorded"
        );
        // A call that answered with an error, one never made, a node that is not an input, a
        // record no input rested on: each is named.
        let other = EvidenceRef::Input {
            node: NodeId::new("b").unwrap(),
        };
        let unknown_record = EvidenceRef::Record {
            key: "doc/2".into(),
            version: quorate_protocols::Version::new(3),
        };
        for bad in [action(1), action(5), other, unknown_record] {
            let judged = cited(&[action(0), bad.clone()], default.clone());
            assert_eq!(
                judged.downgraded,
                Some(CitationFailure::Unrecorded { cited: bad.clone() }),
                "{bad}"
            );
            assert!(matches!(
                judged.verdict,
                Err(AcceptanceFailure::Unverified { .. })
            ));
        }
        // A task that accepts suggestions completes with the downgraded answer.
        let lenient = cited(&[], vec![ResultKind::Suggestion]);
        assert_eq!(lenient.downgraded, Some(CitationFailure::Uncited));
        assert_eq!(lenient.verdict, Ok(()));
        // Other kinds are taken as they are.
        assert_eq!(
            taken_kind(Some(ResultKind::Suggestion), &[], |_| false),
            (Some(ResultKind::Suggestion), None)
        );
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
