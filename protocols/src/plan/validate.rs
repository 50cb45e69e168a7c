use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{NodeId, NodeSpec, PlanSpec};
use crate::{Budget, BudgetError, Capabilities, Component};

/// Why a [`PlanSpec`] was refused. Each variant names the node(s) at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The plan has no nodes.
    #[error("plan has no nodes")]
    Empty,
    /// Two nodes share an id.
    #[error("node id {id} is used more than once")]
    DuplicateId {
        /// The repeated id.
        id: NodeId,
    },
    /// A node depends on an id that is not in the plan.
    #[error("node {node} depends on unknown node {dep}")]
    UnknownDep {
        /// The node.
        node: NodeId,
        /// The missing dependency.
        dep: NodeId,
    },
    /// A node depends on itself.
    #[error("node {node} depends on itself")]
    SelfLoop {
        /// The node.
        node: NodeId,
    },
    /// The dependencies form a cycle; `cycle` lists it in dependency order, first node repeated
    /// at the end (`a -> b -> a` means a depends on b and b on a).
    #[error("dependency cycle: {}", DisplayCycle(.cycle))]
    Cycle {
        /// The nodes of the cycle.
        cycle: Vec<NodeId>,
    },
    /// `reserve + sum(node budgets)` exceeds the plan's budget.
    #[error("reserve + node budgets need {requested} {component} but the plan has {available}")]
    BudgetExceeded {
        /// The first component that does not fit.
        component: Component,
        /// What reserve + nodes need in that component.
        requested: u64,
        /// What the plan's budget holds.
        available: u64,
    },
    /// Summing the budgets overflowed.
    #[error("summing node budgets: {0}")]
    BudgetOverflow(#[from] BudgetError),
    /// A node asks for capabilities the run does not hold (delegation may only narrow).
    #[error("node {node} asks for capabilities the run does not hold: {missing}")]
    CapabilityWidened {
        /// The node.
        node: NodeId,
        /// What it asked for beyond the run's set.
        missing: Capabilities,
    },
}

struct DisplayCycle<'a>(&'a [NodeId]);

impl fmt::Display for DisplayCycle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" -> ")?;
            }
            write!(f, "{id}")?;
        }
        Ok(())
    }
}

/// A validated plan: nodes indexed `0..len()`, with dependency and dependent lists by index and a
/// topological order.
///
/// Immutable and shared: a clone is a reference count, so a run, its resume and a caller can
/// all hold the plan, and the last one to let go frees it. (Freeing one took about 4% of the
/// instructions of running it through `bench dag`, callgrind; the bench keeps its own handle so
/// that the input's freeing is not timed, as its building is not.)
#[derive(Clone, Debug, PartialEq)]
pub struct Plan(std::sync::Arc<Indexed>);

#[derive(Debug, PartialEq)]
struct Indexed {
    spec: PlanSpec,
    deps: Vec<Vec<u32>>,
    dependents: Vec<Vec<u32>>,
    topo: Vec<u32>,
    index: HashMap<NodeId, u32>,
    names: SharedNames,
}

/// The nodes' names as shared strings, each made the first time it is asked for (see
/// [`Plan::shared_name`]); the list itself too, so a run that never asks allocates nothing.
#[derive(Default)]
struct SharedNames(OnceLock<Box<[OnceLock<Arc<str>>]>>);

impl SharedNames {
    fn get(&self, i: usize, len: usize, name: impl FnOnce() -> Arc<str>) -> Arc<str> {
        let names = self
            .0
            .get_or_init(|| (0..len).map(|_| OnceLock::new()).collect());
        names[i].get_or_init(name).clone()
    }
}

impl std::fmt::Debug for SharedNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedNames")
    }
}

/// Made from the spec, so any two are alike.
impl PartialEq for SharedNames {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl PlanSpec {
    /// Checks the plan and indexes it. See [`PlanError`] for what is refused.
    ///
    /// ```
    /// use quorate_protocols::{NodeSpec, PlanError, PlanSpec};
    ///
    /// let spec = PlanSpec {
    ///     nodes: vec![
    ///         NodeSpec::named("a").after(&["c"]),
    ///         NodeSpec::named("b").after(&["a"]),
    ///         NodeSpec::named("c").after(&["b"]),
    ///     ],
    ///     ..PlanSpec::default()
    /// };
    /// let err = spec.validate().unwrap_err();
    /// assert_eq!(err.to_string(), "dependency cycle: a -> c -> b -> a");
    /// ```
    pub fn validate(self) -> Result<Plan, PlanError> {
        if self.nodes.is_empty() {
            return Err(PlanError::Empty);
        }
        let n = self.nodes.len();
        let mut index = HashMap::with_capacity(n);
        for (i, node) in self.nodes.iter().enumerate() {
            if index.insert(node.id.clone(), i as u32).is_some() {
                return Err(PlanError::DuplicateId {
                    id: node.id.clone(),
                });
            }
        }
        let mut deps = Vec::with_capacity(n);
        let mut dependents = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            let mut mine = Vec::with_capacity(node.deps.len());
            for dep in &node.deps {
                if *dep == node.id {
                    return Err(PlanError::SelfLoop {
                        node: node.id.clone(),
                    });
                }
                let &d = index.get(dep).ok_or_else(|| PlanError::UnknownDep {
                    node: node.id.clone(),
                    dep: dep.clone(),
                })?;
                if !mine.contains(&d) {
                    mine.push(d);
                    dependents[d as usize].push(i as u32);
                }
            }
            deps.push(mine);
        }
        let topo = topological_order(&self.nodes, &deps)?;
        check_budget(&self)?;
        for node in &self.nodes {
            let missing = self.capabilities.missing(&node.capabilities);
            if !missing.is_empty() {
                return Err(PlanError::CapabilityWidened {
                    node: node.id.clone(),
                    missing,
                });
            }
        }
        Ok(Plan(std::sync::Arc::new(Indexed {
            spec: self,
            deps,
            dependents,
            topo,
            index,
            names: SharedNames::default(),
        })))
    }
}

fn check_budget(spec: &PlanSpec) -> Result<(), PlanError> {
    let children = Budget::checked_sum(spec.nodes.iter().map(|n| &n.budget))?;
    let needed = children.checked_add(&spec.reserve)?;
    match needed.first_excess(&spec.budget) {
        None => Ok(()),
        Some(component) => Err(PlanError::BudgetExceeded {
            component,
            requested: needed.get(component),
            available: spec.budget.get(component),
        }),
    }
}

/// Iterative three-colour DFS over dependency edges; returns a dependency-first order or the
/// first cycle found.
fn topological_order(nodes: &[NodeSpec], deps: &[Vec<u32>]) -> Result<Vec<u32>, PlanError> {
    const WHITE: u8 = 0;
    const GREY: u8 = 1;
    const BLACK: u8 = 2;
    let mut colour = vec![WHITE; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    // Stack of (node, next dependency position to visit).
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for root in 0..nodes.len() as u32 {
        if colour[root as usize] != WHITE {
            continue;
        }
        colour[root as usize] = GREY;
        stack.push((root, 0));
        while let Some(&mut (node, ref mut pos)) = stack.last_mut() {
            let node_deps = &deps[node as usize];
            if *pos < node_deps.len() {
                let next = node_deps[*pos];
                *pos += 1;
                match colour[next as usize] {
                    WHITE => {
                        colour[next as usize] = GREY;
                        stack.push((next, 0));
                    }
                    GREY => {
                        let start = stack
                            .iter()
                            .position(|&(n, _)| n == next)
                            .expect("a grey node is on the stack");
                        let mut cycle: Vec<NodeId> = stack[start..]
                            .iter()
                            .map(|&(n, _)| nodes[n as usize].id.clone())
                            .collect();
                        cycle.push(nodes[next as usize].id.clone());
                        return Err(PlanError::Cycle { cycle });
                    }
                    _ => {}
                }
            } else {
                colour[node as usize] = BLACK;
                order.push(node);
                stack.pop();
            }
        }
    }
    Ok(order)
}

impl Plan {
    /// The plan as written.
    #[must_use]
    pub fn spec(&self) -> &PlanSpec {
        &self.0.spec
    }

    /// Number of nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.spec.nodes.len()
    }

    /// Always `false`: a valid plan has at least one node.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.spec.nodes.is_empty()
    }

    /// Node `i`.
    #[must_use]
    pub fn node(&self, i: u32) -> &NodeSpec {
        &self.0.spec.nodes[i as usize]
    }

    /// Node `i`'s name as a shared string: made the first time it is asked for, then the same
    /// string for every caller and every clone of the plan. Events name their task with it, so
    /// that naming one allocates nothing (a node id is no shared string: see [`NodeId`]).
    ///
    /// ```
    /// use quorate_protocols::{NodeSpec, PlanSpec};
    /// let plan = PlanSpec { nodes: vec![NodeSpec::named("a")], ..PlanSpec::default() }
    ///     .validate()
    ///     .unwrap();
    /// let name = plan.shared_name(0);
    /// assert_eq!(&*name, "a");
    /// assert!(std::sync::Arc::ptr_eq(&name, &plan.clone().shared_name(0)));
    /// ```
    #[must_use]
    pub fn shared_name(&self, i: u32) -> Arc<str> {
        let nodes = &self.0.spec.nodes;
        self.0.names.get(i as usize, nodes.len(), || {
            Arc::from(nodes[i as usize].id.as_str())
        })
    }

    /// Index of the node with this id.
    #[must_use]
    pub fn index_of(&self, id: &NodeId) -> Option<u32> {
        self.0.index.get(id).copied()
    }

    /// Dependencies of node `i` (deduplicated), by index.
    #[must_use]
    pub fn deps(&self, i: u32) -> &[u32] {
        &self.0.deps[i as usize]
    }

    /// Nodes that depend on node `i`, by index.
    #[must_use]
    pub fn dependents(&self, i: u32) -> &[u32] {
        &self.0.dependents[i as usize]
    }

    /// Every node after all of its dependencies.
    #[must_use]
    pub fn topological_order(&self) -> &[u32] {
        &self.0.topo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(nodes: Vec<NodeSpec>) -> PlanSpec {
        PlanSpec {
            nodes,
            ..PlanSpec::default()
        }
    }

    #[test]
    fn structural_errors_name_the_node() {
        let dup = spec(vec![NodeSpec::named("a"), NodeSpec::named("a")]);
        assert!(matches!(dup.validate(), Err(PlanError::DuplicateId { id }) if id.as_str() == "a"));
        let unknown = spec(vec![NodeSpec::named("a").after(&["zz"])]);
        assert!(
            matches!(unknown.validate(), Err(PlanError::UnknownDep { node, dep }) if node.as_str() == "a" && dep.as_str() == "zz")
        );
        let selfloop = spec(vec![NodeSpec::named("a").after(&["a"])]);
        assert!(matches!(
            selfloop.validate(),
            Err(PlanError::SelfLoop { .. })
        ));
        assert_eq!(spec(vec![]).validate(), Err(PlanError::Empty));
    }

    #[test]
    fn budget_must_cover_reserve_and_children() {
        let mut s = spec(vec![
            NodeSpec::named("a").with_budget(Budget::new(4, 1, 0, 0)),
            NodeSpec::named("b").with_budget(Budget::new(4, 1, 0, 0)),
        ]);
        s.budget = Budget::new(10, 2, 0, 0);
        s.reserve = Budget::new(2, 0, 0, 0);
        assert!(s.clone().validate().is_ok());
        s.reserve = Budget::new(3, 0, 0, 0);
        assert_eq!(
            s.clone().validate(),
            Err(PlanError::BudgetExceeded {
                component: Component::Steps,
                requested: 11,
                available: 10
            })
        );
        s.nodes[0].budget.tokens = u64::MAX;
        s.nodes[1].budget.tokens = 1;
        assert!(matches!(
            s.validate(),
            Err(PlanError::BudgetOverflow(BudgetError::Overflow { .. }))
        ));
    }

    #[test]
    fn nodes_cannot_widen_run_capabilities() {
        let mut s = spec(vec![NodeSpec::named("a")]);
        s.capabilities = Capabilities::parse(["db.read"]).unwrap();
        s.nodes[0].capabilities = Capabilities::parse(["db.read", "db.delete"]).unwrap();
        match s.validate() {
            Err(PlanError::CapabilityWidened { node, missing }) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(missing, Capabilities::parse(["db.delete"]).unwrap());
            }
            other => panic!("expected CapabilityWidened, got {other:?}"),
        }
    }

    /// Random DAG: node i may depend only on nodes < i. Optionally add one back edge that closes
    /// a cycle through a path that exists.
    fn dag() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
        (2usize..30).prop_flat_map(|n| {
            let edges =
                proptest::collection::vec((1..n).prop_flat_map(|i| (Just(i), 0..i)), 0..3 * n);
            (Just(n), edges)
        })
    }

    fn build(n: usize, edges: &[(usize, usize)]) -> PlanSpec {
        let mut nodes: Vec<NodeSpec> = (0..n).map(|i| NodeSpec::named(&format!("n{i}"))).collect();
        for &(from, to) in edges {
            nodes[from]
                .deps
                .push(NodeId::new(format!("n{to}")).unwrap());
        }
        spec(nodes)
    }

    proptest! {
        #[test]
        fn acyclic_plans_are_accepted_in_dependency_order((n, edges) in dag()) {
            let plan = build(n, &edges).validate().unwrap();
            let mut pos = vec![0; n];
            for (p, &i) in plan.topological_order().iter().enumerate() {
                pos[i as usize] = p;
            }
            for i in 0..n as u32 {
                for &d in plan.deps(i) {
                    prop_assert!(pos[d as usize] < pos[i as usize]);
                }
            }
        }

        #[test]
        fn injected_cycles_are_rejected_and_named((n, edges) in dag(), pick in any::<prop::sample::Index>()) {
            prop_assume!(!edges.is_empty());
            // Edge (from -> to) means from depends on to, with to < from. Adding "to depends on
            // from" closes a cycle.
            let (from, to) = edges[pick.index(edges.len())];
            let mut with_cycle = edges.clone();
            with_cycle.push((to, from));
            let s = build(n, &with_cycle);
            match s.clone().validate() {
                Err(PlanError::Cycle { cycle }) => {
                    prop_assert!(cycle.len() >= 3);
                    prop_assert_eq!(cycle.first(), cycle.last());
                    // Every consecutive pair is a real dependency edge of the plan.
                    for pair in cycle.windows(2) {
                        let node = s.nodes.iter().find(|x| x.id == pair[0]).unwrap();
                        prop_assert!(node.deps.contains(&pair[1]), "{} does not depend on {}", pair[0], pair[1]);
                    }
                }
                other => prop_assert!(false, "expected a cycle, got {other:?}"),
            }
        }
    }
}
