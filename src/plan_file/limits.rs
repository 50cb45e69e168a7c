//! A plan file's free-form text and values obey the envelope limits ([`Limits::default`]: 16 KiB
//! per string, nesting depth 32, 64 KiB per value, 64 evidence texts per task): they travel to
//! workers and back in envelopes, whose decoder refuses anything larger. Each value is checked on
//! its own, serialized as JSON, by the decoder's [`prescan`]; the refusal is the decoder's own
//! [`DecodeError`], with the task and the field that carried it.

use quorate_protocols::{prescan, DecodeError, Limits, NodeId};
use serde_json::Value;

use super::{PlanFile, TaskSection};
use quorate_workers::scripted::Step;
use quorate_workers::Script;

/// Where a value over a limit sits, and which limit it broke.
#[derive(Debug)]
pub(super) struct Breach {
    /// The task, or `None` for `[data]`.
    pub(super) task: Option<NodeId>,
    /// The field, as the file names it (`evidence[2]`, `script[0].params`, `data."k"`).
    pub(super) field: String,
    /// The decoder's refusal.
    pub(super) source: DecodeError,
}

/// The first value of `file` over `limits`.
pub(super) fn check(file: &PlanFile, limits: &Limits) -> Result<(), Breach> {
    for (key, value) in &file.data {
        let field = format!("data.{key:?}");
        let bad =
            value_over(&Value::String(key.clone()), limits).or_else(|| value_over(value, limits));
        if let Some(source) = bad {
            return Err(Breach {
                task: None,
                field,
                source,
            });
        }
    }
    let fallback = file.fallback.iter().flat_map(|f| &f.tasks);
    for t in file.tasks.iter().chain(fallback) {
        task(t, limits).map_err(|(field, source)| Breach {
            task: Some(t.id.clone()),
            field,
            source,
        })?;
    }
    Ok(())
}

type FieldError = (String, DecodeError);

fn task(t: &TaskSection, limits: &Limits) -> Result<(), FieldError> {
    if t.evidence.len() > limits.max_evidence {
        return Err((
            "evidence".into(),
            DecodeError::TooManyEvidenceRefs {
                count: t.evidence.len(),
                max: limits.max_evidence,
            },
        ));
    }
    let texts = t
        .evidence
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("evidence[{i}]"), e.as_str()))
        .chain(std::iter::once(("role".to_string(), t.role.as_str())))
        .chain(t.goal.iter().map(|g| ("goal".to_string(), g.as_str())));
    for (field, text) in texts {
        text_within(&field, text, limits)?;
    }
    script(&t.script, "script", limits)
}

fn script(s: &Script, prefix: &str, limits: &Limits) -> Result<(), FieldError> {
    for (i, step) in s.steps.iter().enumerate() {
        let at = format!("{prefix}[{i}]");
        match step {
            Step::Call(c) => {
                within(&format!("{at}.params"), &c.params, limits)?;
                within(&format!("{at}.output"), &c.output, limits)?;
            }
            Step::Answer(a) => within(&format!("{at}.value"), &a.value, limits)?,
            Step::Fail(f) => text_within(&format!("{at}.observation"), &f.observation, limits)?,
            Step::Delegate(d) => {
                for (j, sub) in d.subtasks.iter().enumerate() {
                    let sub_at = format!("{at}.subtasks[{j}]");
                    text_within(&format!("{sub_at}.role"), &sub.role, limits)?;
                    within(&format!("{sub_at}.input"), &sub.input, limits)?;
                    script(&sub.script, &format!("{sub_at}.script"), limits)?;
                }
            }
            Step::DuplicateReply {} | Step::LateReply {} => {}
        }
    }
    Ok(())
}

fn text_within(field: &str, text: &str, limits: &Limits) -> Result<(), FieldError> {
    within(field, &Value::String(text.to_owned()), limits)
}

fn within(field: &str, value: &Value, limits: &Limits) -> Result<(), FieldError> {
    match value_over(value, limits) {
        Some(e) => Err((field.to_owned(), e)),
        None => Ok(()),
    }
}

/// The decoder's refusal of `value` on its own, if any.
fn value_over(value: &Value, limits: &Limits) -> Option<DecodeError> {
    let bytes = serde_json::to_vec(value).expect("JSON values serialize");
    prescan(&bytes, limits).err()
}
