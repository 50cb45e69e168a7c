//! Where things go on the page: the plan DAG in layers (a node one column right of its deepest
//! dependency) and the timeline's time scale. Pure geometry, no HTML.

use std::collections::BTreeMap;

use super::parse::TaskView;

/// Node box width, px.
pub const NODE_W: u32 = 168;
/// Node box height, px.
pub const NODE_H: u32 = 46;
/// Horizontal distance between layers, px.
const COL: u32 = NODE_W + 64;
/// Vertical distance between nodes of a layer, px.
const ROW: u32 = NODE_H + 18;
/// Margin around the drawing, px.
const MARGIN: u32 = 16;
/// Plans larger than this are listed, not drawn.
pub const MAX_DRAWN: usize = 400;

/// The DAG laid out: a position per task (same order as the tasks given) and the drawing's
/// size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DagLayout {
    /// Top-left corner of each task's box.
    pub pos: Vec<(u32, u32)>,
    /// Edges as `(from, to)` task indexes: from a dependency to its dependent.
    pub edges: Vec<(usize, usize)>,
    /// Width, px.
    pub width: u32,
    /// Height, px.
    pub height: u32,
}

/// Lays `tasks` out in layers: a task's layer is one more than its deepest dependency's
/// (dependencies the trace does not name are ignored; a cycle, which a valid plan never has,
/// is cut at the task met again).
#[must_use]
pub fn dag(tasks: &[TaskView]) -> DagLayout {
    let index: BTreeMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut layer: Vec<Option<u32>> = vec![None; tasks.len()];
    for i in 0..tasks.len() {
        depth(i, tasks, &index, &mut layer, &mut vec![false; tasks.len()]);
    }
    let mut rows: BTreeMap<u32, u32> = BTreeMap::new();
    let mut pos = Vec::with_capacity(tasks.len());
    for l in &layer {
        let l = l.unwrap_or(0);
        let row = rows.entry(l).or_default();
        pos.push((MARGIN + l * COL, MARGIN + *row * ROW));
        *row += 1;
    }
    let edges = tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            t.deps
                .iter()
                .filter_map(|d| index.get(d.as_str()).map(|&j| (j, i)))
                .collect::<Vec<_>>()
        })
        .collect();
    let layers = rows.keys().max().map_or(1, |l| l + 1);
    let tallest = rows.values().max().copied().unwrap_or(1);
    DagLayout {
        pos,
        edges,
        width: 2 * MARGIN + layers * COL - (COL - NODE_W),
        height: 2 * MARGIN + tallest * ROW - (ROW - NODE_H),
    }
}

fn depth(
    i: usize,
    tasks: &[TaskView],
    index: &BTreeMap<&str, usize>,
    layer: &mut [Option<u32>],
    visiting: &mut [bool],
) -> u32 {
    if let Some(l) = layer[i] {
        return l;
    }
    if visiting[i] {
        return 0;
    }
    visiting[i] = true;
    let l = tasks[i]
        .deps
        .iter()
        .filter_map(|d| index.get(d.as_str()))
        .map(|&j| depth(j, tasks, index, layer, visiting) + 1)
        .max()
        .unwrap_or(0);
    visiting[i] = false;
    layer[i] = Some(l);
    l
}

/// The timeline's horizontal scale: milliseconds to px.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeScale {
    /// Where time 0 is, px.
    pub left: f64,
    /// Width of the time axis, px.
    pub width: f64,
    /// The run's last moment, ms (at least 1).
    pub end_ms: u64,
}

impl TimeScale {
    /// A scale of `width` px from `left`, for a run that ended at `end_ms`.
    #[must_use]
    pub fn new(left: f64, width: f64, end_ms: u64) -> Self {
        Self {
            left,
            width,
            end_ms: end_ms.max(1),
        }
    }

    /// The x of time `ms`.
    #[must_use]
    pub fn x(&self, ms: u64) -> f64 {
        self.left + self.width * (ms.min(self.end_ms) as f64) / (self.end_ms as f64)
    }

    /// Tick marks: about six round times from 0 to the end.
    #[must_use]
    pub fn ticks(&self) -> Vec<u64> {
        let raw = self.end_ms as f64 / 6.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(magnitude * 10.0)
            .max(1.0) as u64;
        (0..=self.end_ms / step).map(|k| k * step).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, deps: &[&str]) -> TaskView {
        TaskView {
            deps: deps.iter().map(ToString::to_string).collect(),
            ..TaskView::new(id, 1)
        }
    }

    #[test]
    fn a_node_sits_one_layer_right_of_its_deepest_dependency() {
        let tasks = vec![
            task("a", &[]),
            task("b", &["a"]),
            task("c", &["a", "b"]),
            task("d", &[]),
        ];
        let l = dag(&tasks);
        let col = |i: usize| (l.pos[i].0 - MARGIN) / COL;
        assert_eq!((col(0), col(1), col(2), col(3)), (0, 1, 2, 0));
        assert_ne!(l.pos[0], l.pos[3], "two roots, two rows");
        assert_eq!(l.edges, vec![(0, 1), (0, 2), (1, 2)]);
        assert!(l.width >= 3 * NODE_W && l.height >= 2 * NODE_H);
    }

    #[test]
    fn ticks_are_round_and_within_the_run() {
        let s = TimeScale::new(100.0, 1000.0, 137);
        assert_eq!(s.ticks(), vec![0, 50, 100]);
        assert_eq!(s.x(0), 100.0);
        assert_eq!(s.x(137), 1100.0);
        assert_eq!(TimeScale::new(0.0, 10.0, 0).ticks(), vec![0, 1]);
    }
}
