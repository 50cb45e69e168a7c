//! Bounded decoding of envelopes from bytes.
//!
//! [`decode_envelope`] refuses oversized or pathological input *before* handing it to the JSON
//! parser: one linear pass over the bytes checks the total size, the nesting depth and the length
//! of every string. Only then is the input parsed (with unknown fields refused), the number of
//! evidence references checked, and the claimed sender compared with the one the transport
//! authenticated. Every refusal is a typed [`DecodeError`] naming the limit and the value seen.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Envelope, Sender};

/// Caps applied by [`decode_envelope`]. Each cap is inclusive: a value equal to it is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest encoded envelope, in bytes.
    pub max_bytes: usize,
    /// Most evidence references one envelope may carry.
    pub max_evidence: usize,
    /// Longest JSON string (key or value), in bytes after escapes as written.
    pub max_string: usize,
    /// Deepest nesting of arrays and objects (the envelope object itself is depth 1).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024,
            max_evidence: 64,
            max_string: 16 * 1024,
            max_depth: 32,
        }
    }
}

/// Why bytes were not accepted as an envelope. None of these is helped by retrying the same bytes.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The input is longer than [`Limits::max_bytes`].
    #[error("envelope is {len} bytes; the limit is {max}")]
    TooLarge {
        /// Bytes received.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Arrays/objects nest deeper than [`Limits::max_depth`].
    #[error("envelope nests {depth} levels deep; the limit is {max}")]
    TooDeep {
        /// The depth reached when the scan stopped.
        depth: usize,
        /// The cap.
        max: usize,
    },
    /// A string is longer than [`Limits::max_string`].
    #[error("a string at byte {offset} is longer than {max} bytes")]
    StringTooLong {
        /// Where the string starts.
        offset: usize,
        /// The cap.
        max: usize,
    },
    /// More evidence references than [`Limits::max_evidence`].
    #[error("envelope carries {count} evidence references; the limit is {max}")]
    TooManyEvidenceRefs {
        /// References carried.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// Not a well-formed envelope: bad JSON, a missing or unknown field, a wrong type.
    #[error("malformed envelope at line {line}, column {column}: {message}")]
    Malformed {
        /// The parser's message (it names the offending field).
        message: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// The envelope claims a sender other than the one its channel authenticated.
    #[error("envelope claims sender {claimed:?} but arrived from {actual:?}")]
    ForgedSender {
        /// What the bytes claimed.
        claimed: Sender,
        /// Who actually sent them.
        actual: Sender,
    },
}

/// Checks size, depth and string lengths in one pass without parsing.
pub fn prescan(bytes: &[u8], limits: &Limits) -> Result<(), DecodeError> {
    if bytes.len() > limits.max_bytes {
        return Err(DecodeError::TooLarge {
            len: bytes.len(),
            max: limits.max_bytes,
        });
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut string_start = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if i - string_start - 1 > limits.max_string {
                return Err(DecodeError::StringTooLong {
                    offset: string_start,
                    max: limits.max_string,
                });
            }
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                string_start = i;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > limits.max_depth {
                    return Err(DecodeError::TooDeep {
                        depth,
                        max: limits.max_depth,
                    });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Decodes an envelope that arrived from `authenticated`, enforcing `limits`.
///
/// ```
/// use quorate_protocols::*;
///
/// let mut ids = IdSource::seeded(1);
/// let worker = Sender { agent: ids.agent_id(), role: Role::Worker };
/// let (run, task) = (ids.run_id(), ids.task_id());
/// let env = Envelope::new(run, task, worker, "hello".to_string(), &mut ids);
/// let bytes = serde_json::to_vec(&env).unwrap();
/// let back: Envelope<String> = decode_envelope(&bytes, &Limits::default(), worker).unwrap();
/// assert_eq!(back, env);
///
/// // The same bytes arriving on another agent's channel are a forgery.
/// let other = Sender { agent: ids.agent_id(), role: Role::Supervisor };
/// let err = decode_envelope::<String>(&bytes, &Limits::default(), other).unwrap_err();
/// assert!(matches!(err, DecodeError::ForgedSender { .. }));
/// ```
pub fn decode_envelope<P: DeserializeOwned>(
    bytes: &[u8],
    limits: &Limits,
    authenticated: Sender,
) -> Result<Envelope<P>, DecodeError> {
    prescan(bytes, limits)?;
    let envelope: Envelope<P> =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::Malformed {
            message: e.to_string(),
            line: e.line(),
            column: e.column(),
        })?;
    if envelope.evidence.len() > limits.max_evidence {
        return Err(DecodeError::TooManyEvidenceRefs {
            count: envelope.evidence.len(),
            max: limits.max_evidence,
        });
    }
    if envelope.sender != authenticated {
        return Err(DecodeError::ForgedSender {
            claimed: envelope.sender,
            actual: authenticated,
        });
    }
    Ok(envelope)
}

/// Encodes an envelope as JSON bytes (the wire format [`decode_envelope`] reads).
pub fn encode_envelope<P: Serialize>(envelope: &Envelope<P>) -> Vec<u8> {
    serde_json::to_vec(envelope).expect("envelope payloads serialize to JSON without error")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentId, EvidenceRef, Role, RunId, TaskId, Version};

    fn worker() -> Sender {
        Sender {
            agent: AgentId::from_u128(1),
            role: Role::Worker,
        }
    }

    fn env(payload: String, evidence: usize) -> Envelope<String> {
        let mut ids = crate::IdSource::seeded(1);
        let (run, task) = (RunId::from_u128(1), TaskId::from_u128(2));
        let mut e = Envelope::new(run, task, worker(), payload, &mut ids);
        e.evidence = (0..evidence)
            .map(|i| EvidenceRef::Record {
                key: format!("doc/{i}"),
                version: Version::new(i as u64),
            })
            .collect();
        e
    }

    #[test]
    fn size_cap_is_inclusive() {
        let bytes = encode_envelope(&env("x".into(), 0));
        let exact = Limits {
            max_bytes: bytes.len(),
            ..Limits::default()
        };
        assert!(decode_envelope::<String>(&bytes, &exact, worker()).is_ok());
        let one_less = Limits {
            max_bytes: bytes.len() - 1,
            ..Limits::default()
        };
        let err = decode_envelope::<String>(&bytes, &one_less, worker()).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { len, max } if len == max + 1));
    }

    #[test]
    fn string_cap_is_inclusive() {
        let limits = Limits {
            max_string: 100,
            ..Limits::default()
        };
        let ok = encode_envelope(&env("a".repeat(100), 0));
        assert!(decode_envelope::<String>(&ok, &limits, worker()).is_ok());
        let bad = encode_envelope(&env("a".repeat(101), 0));
        assert!(matches!(
            decode_envelope::<String>(&bad, &limits, worker()),
            Err(DecodeError::StringTooLong { max: 100, .. })
        ));
    }

    #[test]
    fn evidence_cap_is_inclusive() {
        let limits = Limits {
            max_evidence: 3,
            ..Limits::default()
        };
        let ok = encode_envelope(&env("p".into(), 3));
        assert!(decode_envelope::<String>(&ok, &limits, worker()).is_ok());
        let bad = encode_envelope(&env("p".into(), 4));
        assert!(matches!(
            decode_envelope::<String>(&bad, &limits, worker()),
            Err(DecodeError::TooManyEvidenceRefs { count: 4, max: 3 })
        ));
    }

    #[test]
    fn depth_is_checked_before_parsing() {
        let limits = Limits::default();
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            decode_envelope::<serde_json::Value>(deep.as_bytes(), &limits, worker()),
            Err(DecodeError::TooDeep { depth: 33, max: 32 })
        ));
        // Brackets inside strings do not count.
        let quoted = encode_envelope(&env("[[[[[[".repeat(20), 0));
        assert!(decode_envelope::<String>(&quoted, &limits, worker()).is_ok());
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let mut value = serde_json::to_value(env("x".into(), 0)).unwrap();
        value["admin"] = serde_json::json!(true);
        let bytes = serde_json::to_vec(&value).unwrap();
        match decode_envelope::<String>(&bytes, &Limits::default(), worker()) {
            Err(DecodeError::Malformed { message, .. }) => {
                assert!(message.contains("admin"), "{message}")
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }
}
