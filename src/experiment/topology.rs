//! Experiment 1: what star and all-to-all exchanges cost, measured on real actors.
//!
//! Every participant is an actix actor; every message is an `Envelope<Turn>` moved between
//! them through a [`CountingTransport`], which counts each envelope and the length of its wire
//! encoding ([`quorate_protocols::encode_envelope`]) before delivering it. A driver starts each
//! round and waits until every participant has received what the round owes it.
//!
//! * **Star** (participant 0 is the supervisor): each of the `n - 1` workers sends a report, the
//!   supervisor answers each with feedback: `2(n-1)` messages a round, `2(n-1)R` in all.
//! * **All-to-all**: every participant sends its contribution to every other one: `n(n-1)` a
//!   round, `n(n-1)R` in all.
//!
//! ## Token model
//!
//! Every message carries `M` tokens of text (whitespace-separated words, counted from the
//! payload that arrived). Let `m` be the messages of one round (`2(n-1)` or `n(n-1)`). What a
//! participant reads in round `r` depends on the [`TokenMode`]:
//!
//! * `full`: a stateless participant re-reads everything it has received so far (rounds
//!   `1..=r`): `sum_r M m r = M m R(R+1)/2`. Quadratic in `R`.
//! * `delta`: a stateful participant reads only what arrived this round: `M m R`.
//! * `artifact`: a stateless participant reads this round's messages plus one artifact, its own
//!   output of the previous round (`M` tokens) instead of the dialogue: `M m R + M n (R-1)`.
//!
//! The closed forms are checked against the counts in every row (`tokens_match`).
//!
//! ## What one agent must read
//!
//! Totals hide where the context lands. Every participant also reports, for each round and for
//! all three token modes at once, what it read; each row keeps the largest single-agent read of
//! any round ([`ReadPerRound`]), for the hub (star participant 0) and for a worker / peer. In round
//! `R` (the largest): star hub `full` `(n-1)MR`, `delta` `(n-1)M`, `artifact` `(n-1)M + M`;
//! star worker `MR`, `M`, `2M`; an all-to-all peer `(n-1)MR`, `(n-1)M`, `(n-1)M + M` (the
//! artifact term only from round 2 on). Those are checked too (`context_match`).
//!
//! ## Wall time
//!
//! Each (topology, n) exchange runs `repeats` times on the same actix system; counts must be the
//! same every time, and the wall time is given as the median with its minimum and maximum.
//!
//! ## Over NATS
//!
//! With [`TopologyTransport::Nats`] (cargo feature `nats`) every counted envelope is published
//! to a JetStream stream of the exchange's run and reaches its participant through that
//! participant's durable pull consumer (`src/experiment/topology_nats.rs`); each row then also carries
//! what the server says it carried ([`NatsCarried`]: messages stored, deliveries), which must
//! equal the formula as well.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use quorate_protocols::{
    encode_envelope, DedupeKey, Envelope, IdSource, Role, RunId, Sender, TaskId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

pub use super::topology_model::{
    closed_form_context, closed_form_tokens, ReadPerRound, TokenMode, Topology,
};
pub use super::topology_report::{
    NatsCarried, TopologyConfig, TopologyReport, TopologyRow, TopologyTransport,
};

/// Counts every envelope and its encoded length on the way to the receiver.
#[derive(Debug, Default)]
pub struct CountingTransport {
    messages: AtomicU64,
    bytes: AtomicU64,
    /// Set: envelopes go through NATS instead of the mailbox.
    #[cfg(feature = "nats")]
    nats: Option<super::topology_nats::NatsRoute>,
}

impl CountingTransport {
    /// Counts `envelope` and delivers it to `to`.
    pub fn send(&self, to: &Recipient<Deliver>, envelope: Envelope<Turn>) {
        self.count(&envelope);
        to.do_send(Deliver(envelope));
    }

    fn count(&self, envelope: &Envelope<Turn>) {
        let len = encode_envelope(envelope).len() as u64;
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// Counts `envelope` and sends it to participant `index` (mailbox `to`), through NATS when
    /// the exchange runs over it.
    fn route(&self, index: usize, to: &Recipient<Deliver>, envelope: Envelope<Turn>) {
        #[cfg(feature = "nats")]
        if let Some(nats) = &self.nats {
            self.count(&envelope);
            nats.publish(index, &envelope);
            return;
        }
        let _ = index;
        self.send(to, envelope);
    }

    /// Envelopes sent.
    #[must_use]
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Encoded bytes sent.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The payload of an exchange message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Round (1-based).
    pub round: u64,
    /// What the message is.
    pub kind: TurnKind,
    /// `M` tokens of text.
    pub text: String,
}

/// What an exchange message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnKind {
    /// Worker -> supervisor.
    Report,
    /// Supervisor -> worker.
    Feedback,
    /// Peer -> peer.
    Contribution,
}

/// A counted message delivered to a participant; it answers `false` for a second copy of an
/// envelope it already read (same dedupe key: a NATS redelivery), which it does not read again.
#[derive(Clone, Debug, Message)]
#[rtype(result = "bool")]
pub struct Deliver(pub Envelope<Turn>);

#[derive(Message)]
#[rtype(result = "()")]
struct Peers(Vec<Recipient<Deliver>>);

#[derive(Message)]
#[rtype(result = "()")]
struct StartRound(u64);

#[derive(Message)]
#[rtype(result = "()")]
struct Stop;

struct Participant {
    index: usize,
    topology: Topology,
    me: Sender,
    run: RunId,
    task: TaskId,
    peers: Vec<Recipient<Deliver>>,
    transport: Arc<CountingTransport>,
    rng: ChaCha8Rng,
    /// The dedupe keys and correlation ids of this participant's envelopes.
    ids: IdSource,
    msg_tokens: u64,
    started: u64,
    finished: u64,
    /// Tokens received per round, and messages.
    received: HashMap<u64, (u64, u64)>,
    /// Dedupe keys of the envelopes read: a second copy is not read again.
    seen: HashSet<DedupeKey>,
    history_tokens: u64,
    last_output_tokens: u64,
    /// The artifact carried into the current round (own output of the previous round).
    carried: u64,
    done: UnboundedSender<(usize, ReadPerRound)>,
}

fn count_tokens(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

impl Participant {
    fn text(&mut self) -> String {
        let words: Vec<String> = (0..self.msg_tokens)
            .map(|_| {
                let len = self.rng.gen_range(1..=8);
                (0..len)
                    .map(|_| self.rng.gen_range(b'a'..=b'z') as char)
                    .collect()
            })
            .collect();
        words.join(" ")
    }

    fn envelope(&mut self, round: u64, kind: TurnKind, text: String) -> Envelope<Turn> {
        let turn = Turn { round, kind, text };
        Envelope::new(self.run, self.task, self.me, turn, &mut self.ids)
    }

    /// Messages this participant receives per round.
    fn expected(&self) -> u64 {
        let others = self.peers.len().saturating_sub(1) as u64;
        match (self.topology, self.index) {
            (Topology::Star, 0) | (Topology::AllToAll, _) => others,
            (Topology::Star, _) => 1,
        }
    }

    fn send(&mut self, to: usize, kind: TurnKind, round: u64, text: String) {
        self.last_output_tokens = count_tokens(&text);
        let envelope = self.envelope(round, kind, text);
        self.transport.route(to, &self.peers[to], envelope);
    }

    fn maybe_finish(&mut self) {
        let round = self.finished + 1;
        if self.started < round {
            return;
        }
        let (tokens, messages) = self.received.get(&round).copied().unwrap_or((0, 0));
        if messages < self.expected() {
            return;
        }
        let carried = self.carried;
        self.finished = round;
        self.history_tokens += tokens;
        let read = ReadPerRound {
            full: self.history_tokens,
            delta: tokens,
            artifact: tokens + carried,
        };
        let _ = self.done.send((self.index, read));
    }
}

impl Actor for Participant {
    type Context = Context<Self>;
}

impl Handler<Peers> for Participant {
    type Result = ();
    fn handle(&mut self, msg: Peers, _: &mut Context<Self>) {
        self.peers = msg.0;
    }
}

impl Handler<Stop> for Participant {
    type Result = ();
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        self.peers.clear();
        ctx.stop();
    }
}

impl Handler<StartRound> for Participant {
    type Result = ();
    fn handle(&mut self, msg: StartRound, _: &mut Context<Self>) {
        let round = msg.0;
        self.started = round;
        self.carried = if round > 1 {
            self.last_output_tokens
        } else {
            0
        };
        match (self.topology, self.index) {
            // The supervisor speaks when the reports are in.
            (Topology::Star, 0) => {}
            (Topology::Star, _) => {
                let text = self.text();
                self.send(0, TurnKind::Report, round, text);
            }
            (Topology::AllToAll, _) => {
                let text = self.text();
                for to in 0..self.peers.len() {
                    if to != self.index {
                        self.send(to, TurnKind::Contribution, round, text.clone());
                    }
                }
            }
        }
        self.maybe_finish();
    }
}

impl Handler<Deliver> for Participant {
    type Result = bool;
    fn handle(&mut self, msg: Deliver, _: &mut Context<Self>) -> bool {
        if !self.seen.insert(msg.0.dedupe) {
            return false;
        }
        let turn = msg.0.payload;
        let entry = self.received.entry(turn.round).or_default();
        entry.0 += count_tokens(&turn.text);
        entry.1 += 1;
        let all_reports = entry.1 == self.expected();
        if self.topology == Topology::Star && self.index == 0 && all_reports {
            for to in 1..self.peers.len() {
                let text = self.text();
                self.send(to, TurnKind::Feedback, turn.round, text);
            }
        }
        self.maybe_finish();
        true
    }
}

/// The exchange could not run.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// Bad configuration.
    #[error("{0}")]
    Config(&'static str),
    /// A participant stopped, or a round did not end within a minute.
    #[error("round {round} did not end (a participant stopped or stalled)")]
    Stalled {
        /// The round.
        round: u64,
    },
    /// The actix runtime failed.
    #[error("actix runtime: {0}")]
    Runtime(String),
    /// `--transport nats` in a build without the cargo feature `nats`.
    #[error("this quorate was built without the NATS transport (build with `--features nats`)")]
    NatsNotBuilt,
    /// The NATS side failed (unreachable server, stream or consumer errors).
    #[error("NATS: {0}")]
    Nats(String),
}

/// How long one round may take before the exchange counts as stalled.
const ROUND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `rounds` rounds among `n` participants in `topology` on the current actix system.
pub async fn exchange(
    topology: Topology,
    n: u64,
    config: &TopologyConfig,
) -> Result<TopologyRow, TopologyError> {
    let (done_tx, mut done_rx) = unbounded_channel();
    // Seeded like everything else in the experiment (ids do not change a message's size).
    let mut ids = IdSource::seeded(config.seed ^ (n << 40) ^ topology as u64);
    let run = ids.run_id();
    let task = ids.task_id();
    let people: Vec<(Sender, IdSource)> = (0..n as usize)
        .map(|index| {
            let role = match (topology, index) {
                (Topology::Star, 0) => Role::Supervisor,
                (Topology::Star, _) => Role::Worker,
                (Topology::AllToAll, _) => Role::Peer,
            };
            let me = Sender {
                agent: ids.agent_id(),
                role,
            };
            (me, ids.fork())
        })
        .collect();
    #[cfg_attr(not(feature = "nats"), allow(unused_mut))]
    let mut transport = CountingTransport::default();
    #[cfg(feature = "nats")]
    let mut link = None;
    match &config.transport {
        TopologyTransport::InProcess => {}
        #[cfg(feature = "nats")]
        TopologyTransport::Nats { url, security } => {
            let senders: Vec<Sender> = people.iter().map(|p| p.0).collect();
            let (opened, route) =
                super::topology_nats::NatsLink::open(url, security, run, &senders).await?;
            transport.nats = Some(route);
            link = Some(opened);
        }
        #[cfg(not(feature = "nats"))]
        TopologyTransport::Nats { .. } => return Err(TopologyError::NatsNotBuilt),
    }
    let transport = Arc::new(transport);
    let addrs: Vec<Addr<Participant>> = people
        .into_iter()
        .enumerate()
        .map(|(index, (me, ids))| {
            Participant {
                index,
                topology,
                me,
                run,
                task,
                peers: Vec::new(),
                transport: transport.clone(),
                rng: ChaCha8Rng::seed_from_u64(
                    config.seed ^ (n << 40) ^ ((index as u64) << 8) ^ topology as u64,
                ),
                ids,
                msg_tokens: config.msg_tokens,
                started: 0,
                finished: 0,
                received: HashMap::new(),
                seen: HashSet::new(),
                history_tokens: 0,
                last_output_tokens: 0,
                carried: 0,
                done: done_tx.clone(),
            }
            .start()
        })
        .collect();
    drop(done_tx);
    let recipients: Vec<Recipient<Deliver>> = addrs.iter().map(|a| a.clone().recipient()).collect();
    for addr in &addrs {
        addr.send(Peers(recipients.clone()))
            .await
            .map_err(|e| TopologyError::Runtime(e.to_string()))?;
    }
    #[cfg(feature = "nats")]
    if let Some(link) = &mut link {
        // What each participant reads in the whole exchange.
        let expect: Vec<u64> = (0..n)
            .map(|i| match (topology, i) {
                (Topology::Star, 0) | (Topology::AllToAll, _) => (n - 1) * config.rounds,
                (Topology::Star, _) => config.rounds,
            })
            .collect();
        link.listen(&recipients, &expect);
    }
    let started = Instant::now();
    let mut tokens = 0;
    let (mut hub, mut worker) = (ReadPerRound::default(), ReadPerRound::default());
    for round in 1..=config.rounds {
        for addr in &addrs {
            addr.do_send(StartRound(round));
        }
        for _ in 0..n {
            let read = actix::clock::timeout(ROUND_TIMEOUT, done_rx.recv()).await;
            let Some((index, read)) = read.ok().flatten() else {
                #[cfg(feature = "nats")]
                if let Some(link) = link {
                    return Err(link.explain(round).await);
                }
                return Err(TopologyError::Stalled { round });
            };
            tokens += read.get(config.mode);
            if index == 0 {
                hub = hub.max(read);
            }
            if index > 0 || n == 1 || topology == Topology::AllToAll {
                worker = worker.max(read);
            }
        }
    }
    let formula_messages = topology.messages_per_round(n) * config.rounds;
    #[cfg(feature = "nats")]
    let nats = match link {
        Some(link) => Some(link.finish(formula_messages).await?),
        None => None,
    };
    #[cfg(not(feature = "nats"))]
    let nats = None;
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    for addr in &addrs {
        addr.do_send(Stop);
    }
    let closed = closed_form_tokens(topology, config.mode, n, config.rounds, config.msg_tokens);
    let (hub_cf, worker_cf) = closed_form_context(topology, n, config.rounds, config.msg_tokens);
    Ok(TopologyRow {
        topology,
        n,
        rounds: config.rounds,
        messages: transport.messages(),
        formula_messages,
        messages_match: transport.messages() == formula_messages,
        bytes: transport.bytes(),
        tokens,
        closed_form_tokens: closed,
        tokens_match: tokens == closed,
        hub_context: hub,
        worker_context: worker,
        largest_context: hub.get(config.mode).max(worker.get(config.mode)),
        context_match: n < 2 || (hub == hub_cf && worker == worker_cf),
        wall_ms,
        wall_ms_min: wall_ms,
        wall_ms_max: wall_ms,
        wall_ms_runs: vec![wall_ms],
        repeats_agree: true,
        nats,
    })
}

/// The median of sorted values (mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    let k = sorted.len();
    if k % 2 == 1 {
        sorted[k / 2]
    } else {
        (sorted[k / 2 - 1] + sorted[k / 2]) / 2.0
    }
}

/// Runs every (topology, n) on a fresh actix system; `progress` is called after each row.
pub fn run_topology(
    config: &TopologyConfig,
    mut progress: impl FnMut(u64, u64),
) -> Result<TopologyReport, TopologyError> {
    if config.agents.is_empty() || config.agents.contains(&0) {
        return Err(TopologyError::Config(
            "--agents needs at least one count, each at least 1",
        ));
    }
    if config.rounds == 0 {
        return Err(TopologyError::Config("--rounds must be at least 1"));
    }
    if config.repeats == 0 {
        return Err(TopologyError::Config("--repeats must be at least 1"));
    }
    let total = 2 * config.agents.len() as u64;
    let system = System::new();
    let rows = system.block_on(async {
        let mut rows = Vec::new();
        for topology in [Topology::Star, Topology::AllToAll] {
            for &n in &config.agents {
                let mut row = exchange(topology, n, config).await?;
                for _ in 1..config.repeats {
                    let again = exchange(topology, n, config).await?;
                    row.repeats_agree &= again.messages == row.messages
                        && again.bytes == row.bytes
                        && again.tokens == row.tokens
                        && again.hub_context == row.hub_context
                        && again.worker_context == row.worker_context
                        && again.nats == row.nats;
                    row.wall_ms_runs.push(again.wall_ms);
                }
                let mut walls = row.wall_ms_runs.clone();
                walls.sort_by(f64::total_cmp);
                row.wall_ms = median(&walls);
                row.wall_ms_min = walls[0];
                row.wall_ms_max = walls[walls.len() - 1];
                rows.push(row);
                progress(rows.len() as u64, total);
            }
        }
        Ok::<_, TopologyError>(rows)
    })?;
    Ok(TopologyReport {
        config: config.clone(),
        rows,
    })
}
