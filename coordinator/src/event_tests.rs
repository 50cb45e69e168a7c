//! Tests of the trace line of an event: the `peer` field only on a peer's event, a call's line
//! as its call event's, and what a bad line's error names.

use super::*;

/// A star event's line has no `peer` field, byte for byte as before peers named
/// themselves; a peer's event carries its writer before its kind, and both read back.
#[test]
fn only_a_peer_event_names_its_writer() {
    let mut event = Event {
        seq: 7,
        run_id: RunId::from_u128(1),
        task: Some("a".into()),
        at_ms: 12,
        peer: None,
        kind: EventKind::Transition {
            from: TaskState::Running,
            to: TaskState::Completed,
        },
    };
    let star = serde_json::to_string(&event).unwrap();
    assert_eq!(
        star,
        r#"{"seq":7,"run_id":"00000000-0000-0000-0000-000000000001","task":"a","at_ms":12,"kind":"transition","from":"running","to":"completed"}"#
    );
    assert_eq!(serde_json::from_str::<Event>(&star).unwrap(), event);
    event.peer = Some(2);
    let peer = serde_json::to_string(&event).unwrap();
    assert_eq!(
        peer,
        r#"{"seq":7,"run_id":"00000000-0000-0000-0000-000000000001","task":"a","at_ms":12,"peer":2,"kind":"transition","from":"running","to":"completed"}"#
    );
    assert_eq!(serde_json::from_str::<Event>(&peer).unwrap(), event);
}

/// A call's trace line is its call event's, after the event's own fields, as before the
/// call kinds were one variant; and a bad line names what is wrong with it.
#[test]
fn a_call_event_keeps_its_trace_line_and_bad_lines_say_why() {
    let action = quorate_protocols::ActionId::new(quorate_protocols::TaskId::from_u128(7), 1, 0);
    let event = Event {
        seq: 3,
        run_id: RunId::from_u128(1),
        peer: None,
        task: Some("fetch".into()),
        at_ms: 5,
        kind: EventKind::of_call(CallEvent::Queried {
            action,
            found: true,
        }),
    };
    let line = serde_json::to_string(&event).unwrap();
    let action_json = serde_json::to_string(&action).unwrap();
    assert_eq!(
        line,
        format!(
            r#"{{"seq":3,"run_id":"{}","task":"fetch","at_ms":5,"kind":"queried","action":{action_json},"found":true}}"#,
            RunId::from_u128(1)
        )
    );
    assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), event);

    let head = r#"{"seq":1,"run_id":"00000000-0000-0000-0000-000000000001","at_ms":0,"#;
    let error = |rest: &str| {
        serde_json::from_str::<Event>(&format!("{head}{rest}"))
            .unwrap_err()
            .to_string()
    };
    assert!(error(r#""kind":"bogus"}"#).contains("unknown variant `bogus`"));
    assert!(error(r#""no-kind":1}"#).contains("missing field `kind`"));
    let bad = "event with a field missing or of the wrong type";
    let transition = error(r#""kind":"transition","from":"pending"}"#);
    assert!(
        transition.contains(&format!("a `transition` {bad}")),
        "{transition}"
    );
    let queried = error(&format!(r#""kind":"queried","action":{action_json}}}"#));
    assert!(queried.contains(&format!("a `queried` {bad}")), "{queried}");
}
