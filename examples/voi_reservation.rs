//! Value of information as an agent policy: buy a read-only query before a reservation only
//! when what it is expected to tell is worth more than it costs.
//!
//! An agent is about to reserve stock whose sufficiency it is unsure of (belief 0.6 that the
//! resource suffices). A reservation that finds enough stock is worth 2, one that does not costs
//! 8 (it has to be undone), and waiting is worth 0. A read-only query (cost 0.2) says `+` with
//! probability 0.9 when the stock suffices and 0.1 when it does not. [`voi::decide`] computes,
//! as a pure function of these numbers:
//!
//! * without the query, the best act is to wait (reserving now is worth 0.6 x 2 + 0.4 x -8 =
//!   -2);
//! * with it, the agent reserves only after a `+` (P(+) = 0.58, P(S|+) = 0.93): the plan is
//!   worth 0.76 before the query's cost and 0.56 after, against 0 without; the value of
//!   information (0.76) exceeds the cost (0.2), so it queries.
//!
//! The policy runs on the real runtime (a supervisor and one worker, on actix): the agent's
//! query and reservation are tool calls through the execution gate, and the run's store holds
//! the stock record `stock/sku-42` at version 7. The reservation is a write guarded by the
//! task's `key-at-version` precondition (the record is still at version 7): a posterior does
//! not replace the atomic precondition. The example runs twice:
//!
//! 1. nothing else writes: query `+`, reserve, done;
//! 2. another writer moves the record from version 7 to 8 right after the query answered: the
//!    gate refuses the reservation (`rejected:precondition`), nothing is reserved, and the agent
//!    re-reads the record and ends without a reservation, citing what it re-read.
//!
//! Every answer cites the runtime's record of the call it rests on (the envelope's
//! `evidence`), so acceptance takes it as a verified conclusion (docs/reliability.md).
//!
//! Run it with:
//!
//! ```text
//! cargo run --example voi_reservation
//! ```
//!
//! `tests/examples_run.rs` runs the same [`run`] (and the unit tests of [`voi`]).

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quorate::coordinator::{run_star, RunOptions, RunReport, SupervisorConfig};
use quorate::protocols::{
    ActionId, Budget, Capabilities, Capability, EvidenceRef, NodeSpec, Payload, PlanSpec,
    Precondition, ResultKind, Version,
};
use quorate::state::{CasOutcome, MemoryStore};
use quorate::workers::{
    Agent, AgentContext, AgentRegistry, GateRejection, Observation, Proposal, SideEffect, Tool,
    ToolAnswer, ToolFuture, ToolRegistry,
};
use serde_json::{json, Value};

/// The decision computation: pure arithmetic over the agent's beliefs and utilities.
pub mod voi {
    /// What the agent believes and values before it acts.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Beliefs {
        /// P(S): the resource suffices.
        pub prior: f64,
        /// Utility of reserving when it suffices.
        pub reserve_if_enough: f64,
        /// Utility of reserving when it does not.
        pub reserve_if_short: f64,
        /// Utility of waiting (not reserving).
        pub wait: f64,
        /// What the query costs (in utility).
        pub query_cost: f64,
        /// P(+ | S): the query says `+` when the resource suffices.
        pub positive_if_enough: f64,
        /// P(+ | not S).
        pub positive_if_short: f64,
    }

    impl Beliefs {
        /// The textbook numbers: belief 0.6, utilities 2 / -8 / 0, query cost 0.2,
        /// P(+|S) = 0.9, P(+|not S) = 0.1.
        #[must_use]
        pub fn textbook() -> Self {
            Self {
                prior: 0.6,
                reserve_if_enough: 2.0,
                reserve_if_short: -8.0,
                wait: 0.0,
                query_cost: 0.2,
                positive_if_enough: 0.9,
                positive_if_short: 0.1,
            }
        }

        /// Expected utility of reserving when the resource suffices with probability `p`.
        #[must_use]
        pub fn reserve_value(&self, p: f64) -> f64 {
            p * self.reserve_if_enough + (1.0 - p) * self.reserve_if_short
        }

        /// The best act at belief `p`, and its expected utility (waiting wins a tie).
        #[must_use]
        pub fn best(&self, p: f64) -> (Act, f64) {
            let reserve = self.reserve_value(p);
            if reserve > self.wait {
                (Act::Reserve, reserve)
            } else {
                (Act::Wait, self.wait)
            }
        }

        /// P(S | reading): the belief after the query said `positive` (Bayes' rule).
        #[must_use]
        pub fn posterior(&self, positive: bool) -> f64 {
            let (if_enough, if_short) = if positive {
                (self.positive_if_enough, self.positive_if_short)
            } else {
                (1.0 - self.positive_if_enough, 1.0 - self.positive_if_short)
            };
            let joint = self.prior * if_enough;
            joint / (joint + (1.0 - self.prior) * if_short)
        }
    }

    /// What the agent does about the reservation.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Act {
        /// Reserve.
        Reserve,
        /// Do not reserve.
        Wait,
    }

    /// The computation behind the decision to query, every figure the example prints.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Decision {
        /// The best act without the query, and its expected utility.
        pub without: (Act, f64),
        /// P(+).
        pub p_positive: f64,
        /// The best act after `+`, its expected utility, and P(S|+).
        pub after_positive: (Act, f64, f64),
        /// The best act after `-`, its expected utility, and P(S|-).
        pub after_negative: (Act, f64, f64),
        /// Expected utility of querying and then acting best, before the query's cost.
        pub with_query: f64,
        /// The value of information: `with_query` minus the best without.
        pub value_of_information: f64,
        /// `with_query` minus the query's cost.
        pub net_with_query: f64,
        /// Query first: the value of information exceeds the query's cost.
        pub query: bool,
    }

    /// Whether to buy the query, and every figure that decides it.
    #[must_use]
    pub fn decide(b: &Beliefs) -> Decision {
        let without = b.best(b.prior);
        let p_positive = b.prior * b.positive_if_enough + (1.0 - b.prior) * b.positive_if_short;
        let (p_yes, p_no) = (b.posterior(true), b.posterior(false));
        let (act_yes, u_yes) = b.best(p_yes);
        let (act_no, u_no) = b.best(p_no);
        let with_query = p_positive * u_yes + (1.0 - p_positive) * u_no;
        let value_of_information = with_query - without.1;
        Decision {
            without,
            p_positive,
            after_positive: (act_yes, u_yes, p_yes),
            after_negative: (act_no, u_no, p_no),
            with_query,
            value_of_information,
            net_with_query: with_query - b.query_cost,
            query: value_of_information > b.query_cost,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn close(a: f64, b: f64) -> bool {
            (a - b).abs() < 1e-9
        }

        #[test]
        fn the_textbook_numbers_buy_the_query_and_reserve_only_after_a_positive() {
            let d = decide(&Beliefs::textbook());
            assert_eq!(d.without.0, Act::Wait);
            assert!(close(d.without.1, 0.0), "{d:?}");
            assert!(close(Beliefs::textbook().reserve_value(0.6), -2.0));
            assert!(close(d.p_positive, 0.58), "{d:?}");
            assert!(close(d.after_positive.2, 0.54 / 0.58), "{d:?}");
            assert_eq!(d.after_positive.0, Act::Reserve);
            assert_eq!(d.after_negative.0, Act::Wait);
            assert!(close(d.with_query, 0.76), "{d:?}");
            assert!(close(d.net_with_query, 0.56), "{d:?}");
            assert!(close(d.value_of_information, 0.76), "{d:?}");
            assert!(d.query);
        }

        #[test]
        fn a_query_that_cannot_change_enough_is_not_bought() {
            // Almost sure: reserving now is worth 1.5; the query would only turn a `-` into a
            // wait, worth 0.17 in expectation, less than its cost.
            let sure = Beliefs {
                prior: 0.95,
                ..Beliefs::textbook()
            };
            let d = decide(&sure);
            assert_eq!(d.without.0, Act::Reserve);
            assert!(close(d.without.1, 1.5), "{d:?}");
            assert!(close(d.value_of_information, 0.17), "{d:?}");
            assert!(!d.query, "{d:?}");
            // And a query that costs more than any decision it could change is never bought.
            let dear = Beliefs {
                query_cost: 1.0,
                ..Beliefs::textbook()
            };
            assert!(!decide(&dear).query);
        }
    }
}

/// The stock record the reservation depends on.
pub const STOCK_KEY: &str = "stock/sku-42";
/// The version the record is at when the run starts (and that the task's precondition names).
pub const STOCK_VERSION: u64 = 7;

/// `stock.query`: reads the stock record (read-only). The sensor is scripted: it says `+` (the
/// world's stock does suffice). With `concurrent_writer` set, another writer moves the record
/// to its next version right after the first query answered.
#[derive(Clone)]
pub struct QueryTool {
    store: Arc<MemoryStore<quorate_protocols::Payload>>,
    concurrent_writer: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Tool for QueryTool {
    fn name(&self) -> &str {
        "stock.query"
    }
    fn capability(&self) -> Capability {
        Capability::new("stock.query").expect("valid capability")
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn call(&self, _action: ActionId, _params: Payload) -> ToolFuture<ToolAnswer> {
        let record = self.store.get_now(STOCK_KEY);
        let answer = match &record {
            Some(r) => ToolAnswer::Ok {
                output: json!({
                    "positive": r.value["units"].as_u64().unwrap_or(0) >= 10,
                    "units": r.value["units"],
                    "version": r.version.raw(),
                })
                .into(),
                cost: Budget::ZERO,
                changed: false,
            },
            None => ToolAnswer::Err {
                class: "missing".into(),
                message: format!("{STOCK_KEY} is absent"),
            },
        };
        if let Some(r) = record {
            if self.concurrent_writer.swap(false, Ordering::SeqCst) {
                let mut value = r.value.into_value();
                value["units"] = json!(3);
                if let CasOutcome::Committed(v) =
                    self.store.cas_now(STOCK_KEY, Some(r.version), value.into())
                {
                    self.log.lock().expect("log").push(format!(
                        "another writer sold 9 units: {STOCK_KEY} moved from v{} to v{}",
                        r.version.raw(),
                        v.raw()
                    ));
                }
            }
        }
        Box::pin(std::future::ready(answer))
    }
}

/// `stock.reserve`: takes 10 units off the stock record by CAS (a non-idempotent write).
#[derive(Clone)]
pub struct ReserveTool {
    store: Arc<MemoryStore<quorate_protocols::Payload>>,
}

impl Tool for ReserveTool {
    fn name(&self) -> &str {
        "stock.reserve"
    }
    fn capability(&self) -> Capability {
        Capability::new("stock.reserve").expect("valid capability")
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::NonIdempotentWrite
    }
    fn call(&self, _action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let units = params["units"].as_u64().unwrap_or(0);
        let answer = match self.store.get_now(STOCK_KEY) {
            Some(r) if r.value["units"].as_u64().unwrap_or(0) >= units => {
                let left = r.value["units"].as_u64().unwrap_or(0) - units;
                let mut value = r.value.into_value();
                value["units"] = json!(left);
                match self.store.cas_now(STOCK_KEY, Some(r.version), value.into()) {
                    CasOutcome::Committed(v) => ToolAnswer::Ok {
                        output: json!({ "reserved": units, "version": v.raw() }).into(),
                        cost: Budget::ZERO,
                        changed: true,
                    },
                    CasOutcome::Conflict { .. } => ToolAnswer::Err {
                        class: "conflict".into(),
                        message: format!("{STOCK_KEY} changed during the reservation"),
                    },
                }
            }
            _ => ToolAnswer::Err {
                class: "short".into(),
                message: format!("{STOCK_KEY} holds fewer than {units} units"),
            },
        };
        Box::pin(std::future::ready(answer))
    }
}

/// The agent: decides with [`voi::decide`], then acts on what the runtime observed.
pub struct Reserver {
    beliefs: voi::Beliefs,
    /// The gate refused the reservation: the next output is the re-read.
    refused: bool,
    log: Arc<Mutex<Vec<String>>>,
}

impl Reserver {
    fn say(&self, line: String) {
        self.log.lock().expect("log").push(line);
    }

    fn query(&self) -> Proposal {
        Proposal::CallTool {
            tool: "stock.query".into(),
            params: json!({ "key": STOCK_KEY }).into(),
            intent_version: 0,
            needs_approval: false,
        }
    }
}

impl Agent for Reserver {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            None => {
                let d = voi::decide(&self.beliefs);
                if d.query {
                    self.say(format!(
                        "step {}: value of information {:.2} > query cost {:.2}: query",
                        ctx.step, d.value_of_information, self.beliefs.query_cost
                    ));
                    return self.query();
                }
                // Not worth querying: act on the prior (this example's beliefs never get here).
                Proposal::Finish {
                    kind: ResultKind::Suggestion,
                    value: json!({ "reserved": false, "why": "acting on the prior" }).into(),
                    evidence: Vec::new(),
                }
            }
            Some(Observation::Output {
                tool,
                output,
                action,
                ..
            }) if tool == "stock.query" => {
                let positive = output["positive"].as_bool().unwrap_or(false);
                let version = output["version"].as_u64().unwrap_or(0);
                let cite = vec![EvidenceRef::Action { action: *action }];
                if self.refused {
                    self.say(format!(
                        "step {}: re-read {STOCK_KEY}: v{version}, {} units; not reserved",
                        ctx.step, output["units"]
                    ));
                    return Proposal::Finish {
                        kind: ResultKind::VerifiedConclusion,
                        value: json!({
                            "reserved": false,
                            "stock_version": version,
                            "why": format!(
                                "{STOCK_KEY} moved from v{STOCK_VERSION} to v{version} after the query: \
                                 the reservation's precondition no longer holds"
                            ),
                        })
                        .into(),
                        evidence: cite,
                    };
                }
                let p = self.beliefs.posterior(positive);
                let (act, value) = self.beliefs.best(p);
                self.say(format!(
                    "step {}: query says {} at v{version}: P(S) = {p:.3}, best act {act:?} ({value:.2})",
                    ctx.step,
                    if positive { "+" } else { "-" },
                ));
                match act {
                    voi::Act::Reserve => Proposal::CallTool {
                        tool: "stock.reserve".into(),
                        params: json!({ "key": STOCK_KEY, "units": 10 }).into(),
                        intent_version: 0,
                        needs_approval: false,
                    },
                    voi::Act::Wait => Proposal::Finish {
                        kind: ResultKind::VerifiedConclusion,
                        value: json!({ "reserved": false, "why": "the query said -" }).into(),
                        evidence: cite,
                    },
                }
            }
            Some(Observation::Output { output, action, .. }) => {
                self.say(format!("step {}: reserved: {output}", ctx.step));
                Proposal::Finish {
                    kind: ResultKind::VerifiedConclusion,
                    value: json!({ "reserved": true, "receipt": output }).into(),
                    evidence: vec![EvidenceRef::Action { action: *action }],
                }
            }
            Some(Observation::Rejected {
                reason: reason @ GateRejection::PreconditionFailed { .. },
                ..
            }) if !self.refused => {
                self.say(format!(
                    "step {}: gate refused the reservation: {reason}",
                    ctx.step
                ));
                self.refused = true;
                self.query()
            }
            Some(other) => Proposal::Fail {
                observation: other.to_string(),
            },
        }
    }
}

/// One run of the policy.
#[derive(Debug)]
pub struct RunResult {
    /// The run's report.
    pub report: RunReport,
    /// The task's accepted result.
    pub result: Option<Value>,
    /// What the agent and the other writer did, in order.
    pub log: Vec<String>,
    /// The stock record's version and units after the run.
    pub stock: (u64, Value),
}

/// The plan: one task that may query and reserve, guarded by the stock record's version.
#[must_use]
pub fn plan() -> PlanSpec {
    let caps = ["stock.query", "stock.reserve"];
    let mut node = NodeSpec::named("reserve")
        .with_role("reserver")
        .with_budget(Budget::new(6, 3, 0, 0))
        .with_capabilities(Capabilities::parse(caps).expect("valid capabilities"))
        .with_preconditions(vec![Precondition::KeyAtVersion {
            key: STOCK_KEY.into(),
            version: Version::new(STOCK_VERSION),
        }]);
    node.goal = Some("reserve 10 units of sku-42 if they are there".into());
    PlanSpec {
        budget: Budget::new(8, 3, 0, 0),
        reserve: Budget::steps(1),
        capabilities: Capabilities::parse(caps).expect("valid capabilities"),
        nodes: vec![node],
    }
}

/// Runs the policy on a fresh store holding the stock record at version 7; with
/// `concurrent_writer`, another writer moves the record right after the first query.
pub fn run(concurrent_writer: bool) -> Result<RunResult, Box<dyn Error>> {
    let store = Arc::new(MemoryStore::new());
    let mut version = None;
    for units in (12..12 + STOCK_VERSION).rev() {
        match store.cas_now(STOCK_KEY, version, json!({ "units": units }).into()) {
            CasOutcome::Committed(v) => version = Some(v),
            CasOutcome::Conflict { .. } => return Err("the stock record is being written".into()),
        }
    }
    assert_eq!(version, Some(Version::new(STOCK_VERSION)));
    let log = Arc::new(Mutex::new(Vec::new()));
    let query = QueryTool {
        store: store.clone(),
        concurrent_writer: Arc::new(AtomicBool::new(concurrent_writer)),
        log: log.clone(),
    };
    let reserve = ReserveTool {
        store: store.clone(),
    };
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: 1,
            ..SupervisorConfig::default()
        },
        store: Some(store.clone()),
        ..RunOptions::default()
    };
    let agent_log = log.clone();
    let out = run_star(plan().validate()?, options, move || {
        let log = agent_log.clone();
        let agents = AgentRegistry::new().with_agent("reserver", move || Reserver {
            beliefs: voi::Beliefs::textbook(),
            refused: false,
            log: log.clone(),
        });
        let mut tools = ToolRegistry::new();
        tools
            .register(Arc::new(query.clone()))
            .expect("one query tool");
        tools
            .register(Arc::new(reserve.clone()))
            .expect("one reserve tool");
        (agents, tools)
    })?;
    let stock = store
        .get_now(STOCK_KEY)
        .map(|r| (r.version.raw(), r.value["units"].clone()))
        .unwrap_or_default();
    let log = log.lock().expect("log").clone();
    Ok(RunResult {
        result: out.result("reserve").map(Payload::into_value),
        report: out.report,
        log,
        stock,
    })
}

fn print_decision(b: &voi::Beliefs) {
    let d = voi::decide(b);
    println!(
        "belief P(S) = {}; utilities: reserve {} if enough, {} if short; wait {}",
        b.prior, b.reserve_if_enough, b.reserve_if_short, b.wait
    );
    println!(
        "query: cost {}, P(+|S) = {}, P(+|not S) = {}",
        b.query_cost, b.positive_if_enough, b.positive_if_short
    );
    println!(
        "  without the query: reserve is worth {:.2}, so {:?} ({:.2})",
        b.reserve_value(b.prior),
        d.without.0,
        d.without.1
    );
    println!(
        "  P(+) = {:.2}; after +: P(S) = {:.3}, {:?} ({:.2}); after -: P(S) = {:.3}, {:?} ({:.2})",
        d.p_positive,
        d.after_positive.2,
        d.after_positive.0,
        d.after_positive.1,
        d.after_negative.2,
        d.after_negative.0,
        d.after_negative.1
    );
    println!(
        "  with the query: {:.2} before its cost, {:.2} after (value of information {:.2} vs cost {:.2}): {}",
        d.with_query,
        d.net_with_query,
        d.value_of_information,
        b.query_cost,
        if d.query { "query first" } else { "do not query" }
    );
}

fn print_run(title: &str, r: &RunResult) {
    println!("\n{title}");
    for line in &r.log {
        println!("  {line}");
    }
    let task = &r.report.tasks[0];
    println!(
        "  task {}: {} after {} attempt(s); calls executed {}, refused {}",
        task.id, task.state, task.attempts, r.report.actions.executed, r.report.actions.rejected
    );
    if let Some(result) = &r.result {
        println!("  result: {result}");
    }
    println!("  {STOCK_KEY}: v{}, {} units", r.stock.0, r.stock.1);
}

fn main() -> Result<(), Box<dyn Error>> {
    println!("-- the decision (pure computation)");
    print_decision(&voi::Beliefs::textbook());
    print_run("-- run 1: nobody else writes", &run(false)?);
    print_run(
        "-- run 2: another writer moves the stock record after the query",
        &run(true)?,
    );
    Ok(())
}
