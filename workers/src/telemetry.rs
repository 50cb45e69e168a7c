//! Names of the spans and call metrics the worker shell records, and the OpenTelemetry GenAI
//! attribute names for model calls.
//!
//! The shells record, the cores stay pure: [`crate::WorkerActor`] opens a [`ATTEMPT_SPAN`]
//! span (child of the run's span, see [`crate::WorkerActor::with_run_span`]) when it takes an
//! assignment and closes it with the attempt's final reply; each tool call runs in a
//! [`TOOL_CALL_SPAN`] span under it (a recovery query in a [`TOOL_QUERY_SPAN`] span) and
//! records its wall time in the [`CALL_DURATION_SECONDS`] histogram. Every span carries the
//! run id, the task id and the attempt number. `docs/observability.md` lists all of it.
//!
//! Model calls are not made yet: [`MODEL_CALL_SPAN`], [`MODEL_CALL_DURATION_SECONDS`] and the
//! [`gen_ai`] attribute names are fixed here for the model-backed agent to use, and
//! [`model_call_span`] opens the span with those attributes declared.

/// Histogram: wall time of one tool call, from its start to its answer or timeout, in
/// seconds; labels `tool` and `outcome` (`answered`, `lost`, `timed-out`).
pub const CALL_DURATION_SECONDS: &str = "quorate_call_duration_seconds";

/// Histogram (reserved, not recorded yet): wall time of one model call, in seconds; labels
/// `model` and `outcome`, like [`CALL_DURATION_SECONDS`].
pub const MODEL_CALL_DURATION_SECONDS: &str = "quorate_model_call_duration_seconds";

/// Span of a whole run (opened by the coordinator's `run_star` / `run_peer`); fields `run`,
/// `topology`, `tasks`, `stop_reason`.
pub const RUN_SPAN: &str = "quorate.run";

/// Span of one attempt of one task on a worker; fields `run`, `task`, `node`, `attempt`,
/// `outcome`.
pub const ATTEMPT_SPAN: &str = "quorate.attempt";

/// Span of one tool call; fields `run`, `task`, `attempt`, `tool`, `action`, `outcome`.
pub const TOOL_CALL_SPAN: &str = "quorate.tool_call";

/// Span of one query of a tool about an action whose outcome was unknown; fields as
/// [`TOOL_CALL_SPAN`].
pub const TOOL_QUERY_SPAN: &str = "quorate.tool_query";

/// Span of one model call (reserved: opened by [`model_call_span`] once model agents exist).
pub const MODEL_CALL_SPAN: &str = "quorate.model_call";

/// OpenTelemetry GenAI semantic-convention attribute names, for the model-call span.
pub mod gen_ai {
    /// The operation: `chat`, `text_completion`, `embeddings`...
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The provider (`openai`, `anthropic`, ...).
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The most tokens the request allowed for the answer.
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    /// The model that answered.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Why the model stopped (`stop`, `length`, ...).
    pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// Tokens of the prompt, as the provider reported them.
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Tokens of the answer, as the provider reported them.
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";

    /// Every name above, in order.
    pub const ALL: [&str; 8] = [
        OPERATION_NAME,
        PROVIDER_NAME,
        REQUEST_MODEL,
        REQUEST_MAX_TOKENS,
        RESPONSE_MODEL,
        RESPONSE_FINISH_REASONS,
        USAGE_INPUT_TOKENS,
        USAGE_OUTPUT_TOKENS,
    ];
}

/// Opens a [`MODEL_CALL_SPAN`] under `parent` (an attempt's span) for a call to `model`, with
/// the [`gen_ai`] attributes declared: the operation and the requested model set, the others
/// to be recorded with `span.record(gen_ai::USAGE_INPUT_TOKENS, n)` once the answer is in.
///
/// Unused: nothing calls this until model calls exist (no agent makes one yet). It is here,
/// with its test, so the model-backed agent opens the span `docs/observability.md` lists.
#[must_use]
pub fn model_call_span(
    parent: &tracing::Span,
    operation: &str,
    provider: &str,
    model: &str,
) -> tracing::Span {
    tracing::info_span!(
        parent: parent,
        "quorate.model_call",
        gen_ai.operation.name = operation,
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.request.max_tokens = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_call_span_declares_every_gen_ai_attribute() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = model_call_span(&tracing::Span::none(), "chat", "local", "m-1");
            let metadata = span.metadata().expect("the span is enabled");
            assert_eq!(metadata.name(), MODEL_CALL_SPAN);
            for name in gen_ai::ALL {
                assert!(
                    metadata.fields().field(name).is_some(),
                    "{name} is not a field of the model-call span"
                );
            }
        });
    }
}
