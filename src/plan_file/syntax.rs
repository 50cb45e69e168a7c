//! The TOML parser's refusals, as [`PlanFileError`]s: an integer too large for TOML gets its own
//! error naming the key and the limit.

use std::path::Path;

use super::PlanFileError;

/// The parser's refusal of `text`; an integer over `i64::MAX` gets its own error naming the key
/// and the limit (the parser only says "number too large to fit in target type").
pub(super) fn error(path: &Path, text: &str, e: &toml::de::Error) -> PlanFileError {
    // The parser's span starts at the literal (it may cover only its first character).
    let literal_at = |start: usize| {
        let rest = text.get(start..)?;
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-')))
            .unwrap_or(rest.len());
        Some((start, &rest[..len]))
    };
    let too_large = e
        .span()
        .and_then(|span| literal_at(span.start))
        .filter(|(_, literal)| integer_too_large(literal));
    match too_large {
        Some((start, literal)) => PlanFileError::IntegerTooLarge {
            path: path.to_path_buf(),
            line: text[..start].matches('\n').count() + 1,
            field: key_before(&text[..start]).unwrap_or_else(|| "a value".to_owned()),
            literal: literal.to_owned(),
        },
        None => PlanFileError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    }
}

/// Whether `literal` is a TOML integer (decimal, `0x`, `0o` or `0b`, with `_` separators) that
/// does not fit in an `i64`.
fn integer_too_large(literal: &str) -> bool {
    let digits: String = literal.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match digits.strip_prefix(['+', '-']) {
        Some(rest) => (digits.starts_with('-'), rest.to_owned()),
        None => (false, digits),
    };
    let (radix, body) = match digits.get(..2) {
        Some("0x") => (16, &digits[2..]),
        Some("0o") => (8, &digits[2..]),
        Some("0b") => (2, &digits[2..]),
        _ => (10, digits.as_str()),
    };
    let is_integer = !body.is_empty() && body.chars().all(|c| c.is_digit(radix));
    let signed = if negative {
        format!("-{body}")
    } else {
        body.to_owned()
    };
    is_integer && i64::from_str_radix(&signed, radix).is_err()
}

/// The key of the `key = ` that `before` ends with, if it does.
fn key_before(before: &str) -> Option<String> {
    let rest = before.trim_end().strip_suffix('=')?.trim_end();
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
    let key = match rest.strip_suffix('"') {
        Some(quoted) => &quoted[quoted.rfind('"')? + 1..],
        None => &rest[rest.trim_end_matches(bare).len()..],
    };
    (!key.is_empty()).then(|| key.to_owned())
}
