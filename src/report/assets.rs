//! The page's inline style and script (no network: nothing is fetched).

/// The page's CSS.
pub(super) const CSS: &str = r#"
:root { --ink:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f7f8fa; --card:#fff;
  --completed:#2f9e5f; --failed:#d64545; --stopped-limit:#e0861e; --cancelled:#8a939e;
  --waiting-approval:#8b5cf6; --running:#2f7de1; --ready:#8ab8ef; --pending:#cbd2d9; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--ink);
  background:var(--bg); }
header { padding:18px 28px 14px; background:var(--card); border-bottom:1px solid var(--line); }
h1 { font-size:20px; margin:0 0 6px; }
h2 { font-size:15px; margin:0 0 10px; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); }
main { padding:18px 28px 40px; display:grid; gap:18px; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:16px 18px;
  overflow-x:auto; }
.meta { color:var(--muted); display:flex; gap:18px; flex-wrap:wrap; font-size:13px; }
.stop { display:flex; align-items:center; gap:12px; margin:8px 0 4px; flex-wrap:wrap; }
.badge { display:inline-block; padding:2px 10px; border-radius:999px; color:#fff; font-weight:600;
  font-size:13px; background:var(--cancelled); }
.stop .detail { font-size:14px; }
.counts { display:flex; gap:8px; flex-wrap:wrap; margin-top:8px; }
.chip { border-radius:999px; padding:1px 9px; font-size:12px; color:#fff; }
.completed { --c:var(--completed); } .failed { --c:var(--failed); }
.stopped-limit { --c:var(--stopped-limit); } .cancelled { --c:var(--cancelled); }
.waiting-approval { --c:var(--waiting-approval); } .running { --c:var(--running); }
.ready { --c:var(--ready); } .pending { --c:var(--pending); }
.badge, .chip, .pill { background:var(--c, var(--cancelled)); }
.pill { color:#fff; border-radius:4px; padding:0 6px; font-size:12px; white-space:nowrap; }
svg text { font-family:inherit; }
.dag .edge { fill:none; stroke:#9aa3af; stroke-width:1.4; }
.dag .node rect { fill:var(--c); fill-opacity:.16; stroke:var(--c); stroke-width:2; }
.dag .node.dropped rect { stroke-dasharray:5 4; fill-opacity:.06; }
.dag .node .id { font-weight:600; font-size:13px; fill:var(--ink); }
.dag .node .st { font-size:11px; fill:var(--c); font-weight:600; filter:brightness(.8); }
.dag .node .ver { font-size:11px; fill:var(--muted); }
.dag .node:hover rect, .dag .node.hl rect { fill-opacity:.35; }
.timeline .lane-bg { fill:#fff; } .timeline .lane-bg.odd { fill:#f4f6f8; }
.timeline .lane-name { font-size:12px; font-weight:600; fill:var(--muted); }
.timeline line.tick { stroke:#e4e7eb; } .timeline text.tick { font-size:10px; fill:var(--muted); text-anchor:middle; }
.timeline .span { fill:var(--c); fill-opacity:.28; stroke:var(--c); stroke-width:1.2; }
.timeline .span.hl { fill-opacity:.55; }
.timeline .span-label { font-size:11px; fill:var(--ink); pointer-events:none; }
.mark circle, .mark path, .mark rect { stroke:#fff; stroke-width:1; }
.mark path.stroke { fill:none; stroke-width:2.2; stroke:var(--m); }
.mark * { fill:var(--m); }
.m-call { --m:#2f7de1; } .m-answer { --m:#1c4f8f; } .m-unknown { --m:#e0861e; } .m-query { --m:#d4a72c; }
.m-recovered { --m:#2f9e5f; } .m-retried { --m:#b7791f; } .m-refused { --m:#d64545; }
.m-approval { --m:#8b5cf6; } .m-approved { --m:#5b3cc4; } .m-denied { --m:#c0266d; }
.m-rejected { --m:#9b1c1c; } .m-committed { --m:#2f9e5f; } .m-run { --m:#52606d; }
.legend { list-style:none; padding:0; margin:8px 0 0; display:flex; gap:14px; flex-wrap:wrap;
  font-size:12px; color:var(--muted); }
.legend li { display:flex; align-items:center; gap:5px; }
.legend .sw { width:12px; height:12px; border-radius:3px; background:var(--c); display:inline-block; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:12px; color:var(--muted); font-weight:600; }
tr.task-row td:first-child { white-space:nowrap; }
h3 { font-size:13px; font-weight:600; margin:0 0 8px; }
td.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tr.hl td { background:#fff8e1; }
tr.task-row.has-notes td { border-bottom:none; }
tr.notes td { padding-top:0; }
.budget { white-space:nowrap; font-variant-numeric:tabular-nums; }
.bar { display:inline-block; width:90px; height:8px; background:#eef1f4; border-radius:4px;
  vertical-align:middle; margin-right:6px; overflow:hidden; }
.bar i { display:block; height:100%; background:var(--running); }
.result code, pre { font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace; }
.result details summary { cursor:pointer; }
.result pre { white-space:pre-wrap; word-break:break-word; max-width:560px; background:#f4f6f8;
  padding:6px 8px; border-radius:6px; margin:6px 0 0; }
.obs { color:var(--failed); font-size:12px; }
.grid2 { display:grid; grid-template-columns: minmax(260px, 1fr) 2fr; gap:18px; }
.hbar { display:flex; align-items:center; gap:8px; margin:4px 0; font-size:13px; }
.hbar .lbl { width:110px; color:var(--muted); }
.hbar .track { flex:1; max-width:260px; background:#eef1f4; border-radius:4px; height:12px; }
.hbar .fill { height:100%; background:var(--failed); border-radius:4px; }
.note { color:var(--muted); }
#events select { font:inherit; margin-left:8px; }
#event-log { max-height:360px; overflow:auto; margin-top:8px; }
#event-log td { padding:3px 8px; font-size:12px; }
"#;

/// The page's script: links the drawings and the table (hovering a task highlights it
/// everywhere) and builds the event log from the embedded events, with a filter by task.
pub(super) const JS: &str = r#"
(function () {
  var data = JSON.parse(document.getElementById('run-data').textContent);
  function highlight(task, on) {
    document.querySelectorAll('[data-task]').forEach(function (el) {
      if (el.getAttribute('data-task') === task) { el.classList.toggle('hl', on); }
    });
  }
  document.querySelectorAll('[data-task]').forEach(function (el) {
    var t = el.getAttribute('data-task');
    el.addEventListener('mouseenter', function () { highlight(t, true); });
    el.addEventListener('mouseleave', function () { highlight(t, false); });
  });
  var section = document.getElementById('events');
  var select = document.createElement('select');
  select.id = 'event-filter';
  var all = document.createElement('option');
  all.value = ''; all.textContent = 'all tasks';
  select.appendChild(all);
  data.tasks.forEach(function (t) {
    var o = document.createElement('option');
    o.value = t; o.textContent = t;
    select.appendChild(o);
  });
  section.querySelector('h2').appendChild(select);
  var box = document.createElement('div');
  box.id = 'event-log';
  var table = document.createElement('table');
  var head = document.createElement('tr');
  ['seq', 'ms', 'task', 'kind', 'fields'].forEach(function (h) {
    var th = document.createElement('th'); th.textContent = h; head.appendChild(th);
  });
  table.appendChild(head);
  var rows = data.events.map(function (e) {
    var tr = document.createElement('tr');
    tr.className = 'event-row';
    tr.setAttribute('data-event-task', e.task || '');
    [e.seq, e.at_ms, e.task || '', e.kind, e.fields].forEach(function (v) {
      var td = document.createElement('td'); td.textContent = String(v); tr.appendChild(td);
    });
    table.appendChild(tr);
    return tr;
  });
  box.appendChild(table);
  section.appendChild(box);
  select.addEventListener('change', function () {
    rows.forEach(function (tr) {
      var show = !select.value || tr.getAttribute('data-event-task') === select.value;
      tr.style.display = show ? '' : 'none';
    });
  });
})();
"#;
