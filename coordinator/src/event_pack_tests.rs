//! Tests of the run log's packing of events and records.

use super::*;
use crate::StopReason;
use quorate_state::{PackedLog, Seq};
use quorate_workers::CallEvent;

/// Up to `limit` events of `run` from `from`.
fn read(log: &PackedLog<Event>, run: RunId, from: Seq, limit: usize) -> Vec<Event> {
    log.read_now(run, from, limit)
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

#[test]
fn every_kind_reads_back_as_written() {
    let run = RunId::from_u128(1);
    let a: Arc<str> = Arc::from("fetch");
    let b: Arc<str> = Arc::from("merge");
    let kinds = vec![
        EventKind::RunStarted {
            tasks: 2,
            plan_version: 1,
            nodes: vec![crate::PlanNode {
                id: quorate_protocols::NodeId::new("merge").unwrap(),
                deps: vec![quorate_protocols::NodeId::new("fetch").unwrap()],
            }],
        },
        EventKind::Transition {
            from: TaskState::Pending,
            to: TaskState::Ready,
        },
        EventKind::Dispatched {
            attempt: 3,
            worker: 1,
            task_id: TaskId::from_u128(9),
            granted: Budget::new(5, 2, 1000, 7),
        },
        EventKind::TaskClosed {
            spent: Budget::steps(2),
        },
        EventKind::TaskSettled {
            spent: Budget::new(1, 0, 7, 0),
        },
        EventKind::ControlSent {
            control: crate::event::StopControl::Reject,
        },
        EventKind::ControlAcknowledged {
            spent: Budget::new(2, 1, 0, 3),
        },
        EventKind::ReplyAccepted,
        EventKind::RejectedDuplicate,
        EventKind::RejectedLate,
        EventKind::RejectedStale,
        EventKind::RejectedUnauthorized,
        EventKind::ResultCommitted {
            result: serde_json::json!({"rows": 3, "note": "x".repeat(200)}).into(),
        },
        // Whole numbers take the varint form; the others, JSON.
        EventKind::ResultCommitted {
            result: serde_json::json!(0).into(),
        },
        EventKind::ResultCommitted {
            result: serde_json::json!(u64::MAX).into(),
        },
        EventKind::ResultCommitted {
            result: serde_json::json!(-3).into(),
        },
        EventKind::ResultCommitted {
            result: serde_json::json!(2.5).into(),
        },
        EventKind::ResultKept {
            version: 12,
            same: false,
            result: serde_json::json!(7).into(),
        },
        EventKind::of_call(CallEvent::CallRejected {
            tool: "db.delete".into(),
            reason: "not in capabilities".into(),
            class: "rejected:missing-capability".into(),
        }),
        EventKind::of_call(CallEvent::CallStarted {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 1, 0),
            tool: "db.save".into(),
            reserved: Budget::new(0, 1, 200, 10),
            model: None,
        }),
        EventKind::of_call(CallEvent::CallStarted {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 3, 0),
            tool: "model.small".into(),
            reserved: Budget::new(0, 1, 200, 0),
            model: Some(Box::new(quorate_protocols::wire::ModelRequest {
                extends: Some(quorate_protocols::ActionId::new(TaskId::from_u128(9), 1, 0)),
                messages: vec![quorate_protocols::ParamDigest::of(&serde_json::json!("m"))],
                options: quorate_protocols::ParamDigest::of(&serde_json::json!({})),
                blobs: vec![],
            })),
        }),
        EventKind::Blob(Box::new(quorate_protocols::wire::Blob::of(
            serde_json::json!("m"),
        ))),
        EventKind::of_call(CallEvent::CallAborted {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 3, 0),
            charged: Budget::new(0, 1, 200, 0),
        }),
        EventKind::of_call(CallEvent::CallAnswered {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 1, 0),
            changed: true,
            cost: Budget::new(0, 1, 0, 2),
            error: Some("conflict".into()),
            model: None,
        }),
        EventKind::of_call(CallEvent::CallAnswered {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 3, 0),
            changed: false,
            cost: Budget::new(0, 1, 40, 0),
            error: None,
            model: Some(Box::new(quorate_protocols::wire::ModelAnswer::of(
                &serde_json::json!({"usage": {"prompt_tokens": 31, "completion_tokens": 9},
                    "finish_reason": "stop"}),
                250,
                false,
            ))),
        }),
        EventKind::of_call(CallEvent::OutcomeUnknown {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 2, 0),
        }),
        EventKind::of_call(CallEvent::Queried {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 2, 0),
            found: false,
        }),
        EventKind::of_call(CallEvent::Retried {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 2, 0),
        }),
        EventKind::of_call(CallEvent::Recovered {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 2, 1),
        }),
        EventKind::of_call(CallEvent::AnsweredFromRecord {
            action: quorate_protocols::ActionId::new(TaskId::from_u128(9), 3, 0),
        }),
        EventKind::ConclusionDowngraded {
            reason: "it cites nothing the runtime recorded".into(),
        },
        EventKind::StopRequested {
            reason: StopReason::Cancelled,
        },
        EventKind::RunResumed {
            replayed: 40,
            redispatched: 2,
        },
        EventKind::AcceptanceFailed {
            observation: "empty".into(),
        },
        EventKind::ApprovalRequested {
            reason: "deletes rows".into(),
        },
        EventKind::ApprovalDecided { approved: true },
        EventKind::TopUpRequested {
            request: Box::new(crate::TopUpRequest {
                component: quorate_protocols::Component::Tokens,
                needed: 20,
                spent: Budget::new(2, 2, 100, 0),
                granted: Budget::new(10, 10, 100, 0),
                left: Budget::new(5, 0, 300, 9),
            }),
        },
        EventKind::TopUpDecided {
            answer: crate::TopUp::Grant(Budget::new(0, 0, 200, 0)),
        },
        EventKind::CancelRequested,
        EventKind::BudgetRefused {
            detail: "steps: 3 > 2".into(),
        },
        EventKind::Replanned {
            plan_version: 2,
            tasks: 5,
            nodes: vec![],
        },
        EventKind::PreconditionFailed {
            observation: "version moved".into(),
        },
        EventKind::RunStopped {
            stop_reason: "completed".into(),
        },
    ];
    let mut indices: Vec<usize> = kinds.iter().map(EventKind::index).collect();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(
        indices.len(),
        crate::event::KIND_NAMES.len(),
        "every kind is covered"
    );
    for kind in &kinds {
        let json = serde_json::to_value(kind).expect("serializes");
        assert_eq!(
            json["kind"],
            kind.name(),
            "the counted name is the trace's kind"
        );
    }
    for kind in &kinds {
        // Packing tells the shell's tally the kinds every task logs, and only those.
        let parts = Parts {
            seq: 0,
            run_id: run,
            task: None,
            at_ms: 0,
            kind,
            peer: None,
        };
        let at = Slot { run, seq: Seq(0) };
        let told = parts.pack(at, &mut Names::default(), &mut Vec::new());
        let compact = matches!(
            kind,
            EventKind::Transition { .. }
                | EventKind::Dispatched { .. }
                | EventKind::TaskClosed { .. }
                | EventKind::ReplyAccepted
                | EventKind::ResultCommitted { .. }
        );
        assert_eq!(told, compact.then(|| kind.index()), "{kind:?}");
    }
    let log = PackedLog::new();
    let mut written = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        let event = Event {
            // A resumed core may number from elsewhere; the offset keeps it exact.
            seq: if i == 4 { 40 } else { i as u64 },
            run_id: if i == 5 { RunId::from_u128(2) } else { run },
            peer: (i % 4 == 1).then_some(i),
            task: match i % 3 {
                0 => None,
                1 => Some(a.clone()),
                _ => Some(b.clone()),
            },
            at_ms: 1000 * i as u64,
            kind,
        };
        log.append_now(run, &event);
        written.push(event);
    }
    let back = read(&log, run, Seq(0), 100);
    assert_eq!(back, written);
    // One of each kind, most of them rare ones written as JSON (a call's action id alone is
    // ~80 bytes of it): still smaller than the structs, without the heap they point to.
    let struct_bytes = written.len() * std::mem::size_of::<Event>();
    assert!(log.bytes(run) < struct_bytes, "{}", log.bytes(run));
}

#[test]
fn names_are_written_once_per_chunk_and_read_from_anywhere() {
    // The events' names as seven shared strings, and as a string of its own for every event:
    // the table knows a name by its text, so the log is as small either way (keyed by the
    // strings' addresses, it wrote the text every time in the second case, and its size in the
    // first depended on where the allocator put the seven).
    let run = RunId::from_u128(1);
    let names: Vec<Arc<str>> = (0..7).map(|i| Arc::from(format!("node-{i}"))).collect();
    let shared = |i: u64| names[(i % 7) as usize].clone();
    let own = |i: u64| Arc::from(format!("node-{}", i % 7));
    for name in [&shared as &dyn Fn(u64) -> Arc<str>, &own] {
        let log = PackedLog::new();
        let events: Vec<Event> = (0..3000u64)
            .map(|i| Event {
                seq: i,
                run_id: run,
                peer: None,
                task: (i % 5 != 0).then(|| name(i)),
                at_ms: i,
                kind: EventKind::ReplyAccepted,
            })
            .collect();
        for e in &events {
            log.append_now(run, e);
        }
        for from in [0u64, 1, 1023, 1024, 1025, 2047, 2999] {
            let got = read(&log, run, Seq(from), 3);
            let end = (from as usize + 3).min(events.len());
            assert_eq!(got, events[from as usize..end], "from {from}");
        }
        // Three or four bytes an event: head, name number, time; the names' text once a chunk.
        assert!(log.bytes(run) < 3000 * 5, "{}", log.bytes(run));
    }
}

#[test]
fn colliding_and_equal_names_read_back_as_written() {
    let run = RunId::from_u128(1);
    // More distinct names than the packing table has slots, so some collide; a second Arc
    // with the same text is the same name to the table (it knows a name by its text).
    let names: Vec<Arc<str>> = (0..1500).map(|i| Arc::from(format!("n{i}"))).collect();
    let twin: Arc<str> = Arc::from("n7");
    let log = PackedLog::new();
    let mut written = Vec::new();
    let order = (0..1500).chain((0..1500).rev().step_by(3)).chain([7, 7]);
    for (k, i) in order.enumerate() {
        let task = if k % 11 == 0 {
            twin.clone()
        } else {
            names[i].clone()
        };
        let event = Event {
            seq: k as u64,
            run_id: run,
            peer: None,
            task: Some(task),
            at_ms: k as u64,
            kind: EventKind::ResultCommitted {
                result: serde_json::json!(i).into(),
            },
        };
        log.append_now(run, &event);
        written.push(event);
    }
    let back = read(&log, run, Seq(0), usize::MAX);
    assert_eq!(back, written);
}

#[test]
fn times_ids_and_grants_read_back_across_deltas_and_chunks() {
    let run = RunId::from_u128(1);
    let name: Arc<str> = Arc::from("t");
    let prefix = 0xabcd_u128 << 64;
    // Deltas small and large, both ways, and just past what the varint form holds
    // (|delta| >= 2^62 goes raw).
    let ids = [
        prefix | 5,
        prefix | 4,
        prefix | 900_000,
        7,
        u128::MAX,
        0,
        1 << 62,
        (1 << 62) - 1,
        prefix | 6,
    ];
    let grants = [Budget::steps(3), Budget::steps(3), Budget::new(1, 2, 3, 4)];
    let events: Vec<Event> = (0..2600u64)
        .map(|i| Event {
            seq: i,
            run_id: run,
            peer: None,
            task: Some(name.clone()),
            // Mostly forward, sometimes back (a resumed core's clock), once far ahead.
            at_ms: match i % 9 {
                _ if i == 2000 => u64::MAX,
                4 => i.saturating_sub(50),
                _ => i * 3,
            },
            kind: EventKind::Dispatched {
                attempt: 1,
                worker: 0,
                task_id: TaskId::from_u128(ids[i as usize % ids.len()]),
                granted: grants[(i % 3) as usize],
            },
        })
        .collect();
    let log = PackedLog::new();
    for e in &events {
        log.append_now(run, e);
    }
    for from in [0u64, 1023, 1024, 2047, 2048, 2599] {
        let got = read(&log, run, Seq(from), 5);
        let end = (from as usize + 5).min(events.len());
        assert_eq!(got, events[from as usize..end], "from {from}");
    }
    let all = read(&log, run, Seq(0), usize::MAX);
    assert_eq!(all, events);
}

#[test]
fn a_run_of_minted_ids_and_one_grant_packs_small() {
    let run = RunId::from_u128(1);
    let name: Arc<str> = Arc::from("t");
    let log = PackedLog::new();
    for i in 0..1000u64 {
        log.append_now(
            run,
            &Event {
                seq: i,
                run_id: run,
                peer: None,
                task: Some(name.clone()),
                at_ms: 10_000 + i / 10,
                kind: EventKind::Dispatched {
                    attempt: 1,
                    worker: 0,
                    task_id: TaskId::from_u128((0xfeed_u128 << 64) | u128::from(i)),
                    granted: Budget::new(10, 2, 1000, 50),
                },
            },
        );
    }
    // head, name number, time, attempt, worker, id delta, same grant: 7 bytes.
    assert!(log.bytes(run) <= 1000 * 7 + 64, "{}", log.bytes(run));
}

#[test]
fn every_state_reads_back_from_its_code() {
    // `state_index` matches every state exhaustively; its codes are the positions in
    // `TaskState::ALL` (which stands beside the enum: Rust cannot count an enum's variants).
    for (i, &state) in TaskState::ALL.iter().enumerate() {
        assert_eq!(usize::from(state_code(state)), i, "{state}");
        assert_eq!(STATES[i], state);
    }
}

#[test]
fn records_read_back_as_the_events_they_stand_for() {
    use quorate_protocols::{NodeSpec, PlanSpec};
    let run = RunId::from_u128(1);
    let plan = PlanSpec {
        nodes: (0..7).map(|i| NodeSpec::named(&format!("n{i}"))).collect(),
        ..PlanSpec::default()
    }
    .validate()
    .unwrap();
    // Named outright, as a record emitted before a replan is: the same text as node 3's name,
    // known by another key.
    let renamed: Arc<str> = Arc::from("n3");
    let records: Vec<Record> = (0..3000u64)
        .map(|i| Record {
            seq: i,
            task: match i % 4 {
                0 => RecordTask::None,
                1 => RecordTask::Named(renamed.clone()),
                _ => RecordTask::Node((i % 7) as u32),
            },
            at_ms: i / 3,
            kind: if i % 2 == 0 {
                EventKind::Transition {
                    from: TaskState::Pending,
                    to: TaskState::Ready,
                }
            } else {
                EventKind::Dispatched {
                    attempt: 1,
                    worker: 0,
                    task_id: TaskId::from_u128(u128::from(i)),
                    granted: Budget::steps(i % 3),
                }
            },
        })
        .collect();
    let events: Vec<Event> = records
        .iter()
        .map(|r| r.clone().into_event(run, &plan))
        .collect();
    let by_record = PackedLog::new();
    let writer = by_record.writer(run);
    let mut held = writer.hold();
    for (i, r) in records.iter().enumerate() {
        let seq = held.append_with(|at, names, out| {
            pack_record(r, run, (&plan, 1), at, names, out);
        });
        assert_eq!(seq, Seq(i as u64));
    }
    drop(held);
    let by_event = PackedLog::new();
    for e in &events {
        by_event.append_now(run, e);
    }
    assert_eq!(read(&by_record, run, Seq(0), usize::MAX), events);
    assert_eq!(read(&by_event, run, Seq(0), usize::MAX), events);
    // The same format: names once a chunk either way.
    assert!(by_record.bytes(run) <= by_event.bytes(run) + 64);
}

#[test]
fn the_widest_compact_entries_read_back() {
    // Every optional part at once and every number at its widest: another run, a seq offset,
    // the largest time and attempt, and a task id and grant unlike the chunk's previous ones.
    let run = RunId::from_u128(1);
    let name: Arc<str> = Arc::from("n");
    let widest = Budget::new(u64::MAX, u64::MAX, u64::MAX, u64::MAX);
    let events: Vec<Event> = [
        EventKind::Dispatched {
            attempt: u32::MAX,
            worker: usize::MAX,
            task_id: TaskId::from_u128(u128::MAX),
            granted: widest,
        },
        EventKind::TaskClosed { spent: widest },
    ]
    .into_iter()
    .map(|kind| Event {
        seq: u64::MAX,
        run_id: RunId::from_u128(u128::MAX),
        peer: None,
        task: Some(name.clone()),
        at_ms: u64::MAX,
        kind,
    })
    .collect();
    let log = PackedLog::new();
    for e in &events {
        log.append_now(run, e);
    }
    assert_eq!(read(&log, run, Seq(0), 10), events);
}

#[test]
fn a_node_index_names_the_node_of_the_plan_version_it_was_recorded_under() {
    use quorate_protocols::{NodeSpec, PlanSpec};
    let run = RunId::from_u128(1);
    let plan = |names: &[&str]| {
        PlanSpec {
            nodes: names.iter().map(|n| NodeSpec::named(n)).collect(),
            ..PlanSpec::default()
        }
        .validate()
        .unwrap()
    };
    // A replan lists the same nodes in another order: index 0 is "load", then "draft".
    let (first, second) = (plan(&["load", "draft"]), plan(&["draft", "load"]));
    let record = |seq| Record {
        seq,
        task: RecordTask::Node(0),
        at_ms: seq,
        kind: EventKind::ReplyAccepted,
    };
    let log = PackedLog::new();
    let writer = log.writer(run);
    let mut held = writer.hold();
    for (seq, version) in [(0, 1), (1, 1), (2, 2), (3, 2)] {
        let plan = if version == 1 { &first } else { &second };
        held.append_with(|at, names, out| {
            pack_record(&record(seq), run, (plan, version), at, names, out);
        });
    }
    drop(held);
    let names: Vec<Option<String>> = read(&log, run, Seq(0), 10)
        .into_iter()
        .map(|e| e.task.map(|t| t.to_string()))
        .collect();
    assert_eq!(
        names,
        ["load", "load", "draft", "draft"].map(|n| Some(n.to_string()))
    );
}

#[test]
fn a_whole_number_result_packs_as_a_varint_and_reads_back_equal() {
    let run = RunId::from_u128(1);
    let bytes_of = |result: serde_json::Value| {
        let log = PackedLog::new();
        let event = Event {
            seq: 0,
            run_id: run,
            peer: None,
            task: None,
            at_ms: 0,
            kind: EventKind::ResultCommitted {
                result: result.into(),
            },
        };
        log.append_now(run, &event);
        assert_eq!(read(&log, run, Seq(0), 1), vec![event]);
        log.bytes(run)
    };
    // Head, time, then one varint byte; JSON would add its length byte.
    assert_eq!(bytes_of(serde_json::json!(2)), 3);
    assert_eq!(
        bytes_of(serde_json::json!(-2)),
        5,
        "-2: length byte + 2 JSON bytes"
    );
    assert_eq!(bytes_of(serde_json::json!(u64::MAX)), 12, "10 varint bytes");
}
