//! Where a durable run keeps what its workers and scripted tools must not forget in a crash: the
//! actions a worker sent to a tool ([`ActionIntent`]) and the effects the scripted world
//! committed. The runtime only calls the hook; the CLI's durable store implements it.

use quorate_protocols::{ActionId, ParamDigest};
use serde::{Deserialize, Serialize};

use crate::scripted::CommittedEffect;

/// An action a worker is about to send to a tool, written before the call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionIntent {
    /// The action.
    pub action: ActionId,
    /// The tool.
    pub tool: String,
    /// Digest of its parameters.
    pub digest: ParamDigest,
}

/// Keeps action intents and committed effects past the process. Each call returns once what it
/// was given is durable (an implementation that cannot make it durable must not return: it ends
/// the process, as acting on a lost write is what the journal exists to prevent).
pub trait ActionJournal: Send + Sync + std::fmt::Debug {
    /// `intent` is about to be sent to its tool.
    fn intent(&self, intent: &ActionIntent);
    /// A scripted tool committed `effect`.
    fn effect(&self, effect: &CommittedEffect);
}
