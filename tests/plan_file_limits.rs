//! A plan file's limits, each refused at load with a typed error naming the file, the task and
//! the field (docs/cli.md, "Bad inputs"): its size, its integers, and its text and values, which
//! obey the envelope decoder's limits (`Limits::default()`) and get the decoder's own errors.

mod support;

use std::path::Path;

use quorate::plan_file::{PlanFile, PlanFileError, MAX_PLAN_FILE_BYTES};
use quorate::protocols::DecodeError;

/// A one-task plan whose task has `task_lines` (TOML lines of its `[[tasks]]` table).
fn plan_with(task_lines: &str) -> String {
    format!(
        "[run]\nbudget = {{ steps = 10, tool_calls = 2 }}\ncapabilities = [\"db.read\"]\n\
         [[tasks]]\nid = \"gather\"\ncapabilities = [\"db.read\"]\n\
         budget = {{ steps = 5, tool_calls = 1 }}\n{task_lines}\n"
    )
}

fn parse(text: &str) -> Result<PlanFile, PlanFileError> {
    PlanFile::parse(Path::new("plan.toml"), text)
}

/// `params` nested `depth` inline tables deep (the outermost table is depth 1).
fn nested(depth: usize) -> String {
    "{ a = ".repeat(depth) + "1" + &" }".repeat(depth)
}

#[test]
fn a_string_over_16_kib_is_refused_naming_the_task_and_field() {
    let long = "x".repeat(16 * 1024 + 1);
    let err = parse(&plan_with(&format!("evidence = [\"ok\", \"{long}\"]"))).unwrap_err();
    match &err {
        PlanFileError::Limit {
            task: Some(task),
            field,
            source: DecodeError::StringTooLong { max: 16_384, .. },
            ..
        } => {
            assert_eq!(task.as_str(), "gather");
            assert_eq!(field, "evidence[1]");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "plan.toml: task gather: evidence[1]: a string at byte 0 is longer than 16384 bytes"
    );
    // Exactly 16 KiB is within the limit.
    let at_limit = "x".repeat(16 * 1024);
    assert!(parse(&plan_with(&format!("evidence = [\"{at_limit}\"]"))).is_ok());
}

#[test]
fn params_nested_deeper_than_32_are_refused() {
    let script = |depth| {
        plan_with(&format!(
            "script = [ {{ do = \"call\", tool = \"db.read\", params = {} }} ]",
            nested(depth)
        ))
    };
    assert!(parse(&script(32)).is_ok(), "depth 32 is within the limit");
    for depth in [33, 64] {
        let err = parse(&script(depth)).unwrap_err();
        assert!(
            matches!(
                &err,
                PlanFileError::Limit { field, source: DecodeError::TooDeep { depth: 33, max: 32 }, .. }
                    if field == "script[0].params"
            ),
            "depth {depth}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            "plan.toml: task gather: script[0].params: envelope nests 33 levels deep; the limit is 32"
        );
    }
}

#[test]
fn more_than_64_evidence_texts_and_oversized_data_are_refused() {
    let many: Vec<String> = (0..65).map(|i| format!("\"e{i}\"")).collect();
    let err = parse(&plan_with(&format!("evidence = [{}]", many.join(", ")))).unwrap_err();
    assert!(
        matches!(
            err,
            PlanFileError::Limit {
                source: DecodeError::TooManyEvidenceRefs { count: 65, max: 64 },
                ..
            }
        ),
        "{err:?}"
    );
    // A `[data]` value belongs to no task; an answer value is checked like params.
    let data = plan_with("").replace(
        "[[tasks]]",
        &format!("[data]\nk = {}\n[[tasks]]", nested(40)),
    );
    let err = parse(&data).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plan.toml: data.\"k\": envelope nests 33 levels deep; the limit is 32"
    );
    let answer = plan_with(&format!(
        "script = [ {{ do = \"answer\", value = {} }} ]",
        nested(33)
    ));
    assert!(matches!(
        parse(&answer).unwrap_err(),
        PlanFileError::Limit { field, .. } if field == "script[0].value"
    ));
}

#[test]
fn a_plan_file_over_1_mib_is_refused_before_it_is_parsed() {
    // 5 MB of evidence: refused by size, before any parsing.
    let text = plan_with(&format!("evidence = [\"{}\"]", "x".repeat(5_000_000)));
    let path = support::temp_path("huge.toml");
    std::fs::write(&path, &text).unwrap();
    let err = PlanFile::load(&path).unwrap_err();
    match err {
        PlanFileError::TooLarge { len, max, .. } => {
            assert_eq!(len, text.len() as u64);
            assert_eq!(max, MAX_PLAN_FILE_BYTES);
            assert_eq!(max, 1 << 20);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&text).unwrap_err(),
        PlanFileError::TooLarge { .. }
    ));
}

#[test]
fn an_integer_over_2_pow_63_minus_1_names_the_field_and_the_limit() {
    let text =
        "[run]\nbudget = { steps = 10, tokens = 18446744073709551615 }\n[[tasks]]\nid = \"a\"\n";
    let err = parse(text).unwrap_err();
    match &err {
        PlanFileError::IntegerTooLarge {
            line,
            field,
            literal,
            ..
        } => {
            assert_eq!((*line, field.as_str()), (2, "tokens"));
            assert_eq!(literal, "18446744073709551615");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "plan.toml: line 2: tokens = 18446744073709551615 is out of range: plan files take \
         integers up to 2^63-1 (9223372036854775807)"
    );
    // 2^63-1 itself is taken; a quoted key is named too.
    let max = text.replace("18446744073709551615", "9223372036854775807");
    assert!(parse(&max).is_ok());
    let quoted = "[run]\nbudget = { steps = 10 }\n[data]\n\"config/limit\" = 9_223_372_036_854_775_808\n[[tasks]]\nid = \"a\"\n";
    assert!(matches!(
        parse(quoted).unwrap_err(),
        PlanFileError::IntegerTooLarge { line: 4, field, .. } if field == "config/limit"
    ));
}

#[test]
fn an_attempt_timeout_not_longer_than_the_call_timeout_is_refused() {
    for attempt in [50, 100] {
        let text = plan_with("").replace(
            "[[tasks]]",
            &format!("call_timeout_ms = 100\nattempt_timeout_ms = {attempt}\n[[tasks]]"),
        );
        let file = parse(&text).expect("parses");
        let err = file.compile(Path::new("plan.toml")).unwrap_err();
        match &err {
            PlanFileError::Setting { field, value, .. } => {
                assert_eq!((*field, *value), ("attempt_timeout_ms", attempt));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("plan.toml: run.attempt_timeout_ms is {attempt}: it must be longer than run.call_timeout_ms (100)")),
            "{text}"
        );
    }
}
