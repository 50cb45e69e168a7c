//! `quorate experiment topology --transport nats` against a spawned nats-server: the envelopes
//! travel through JetStream, and the server's own counts (messages stored, deliveries) are
//! exactly 2(n-1)R for the star and n(n-1)R all-to-all; everything the participants counted is
//! what the in-process run counts.

mod support;

use support::{quorate, stdout_json};

use quorate_nats::server::NatsServer;

fn topology(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "experiment",
        "topology",
        "--agents",
        "1,2,3,5",
        "--rounds",
        "3",
        "--msg-tokens",
        "20",
        "--seed",
        "4",
        "--repeats",
        "2",
        // The test's server is plain NATS on loopback: the development flag.
        "--allow-plaintext",
    ];
    args.extend_from_slice(extra);
    quorate(&args)
}

#[test]
fn nats_carries_exactly_the_formula_and_the_counts_match_in_process() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let url = server.url();
    let out = topology(&["--transport", "nats", "--nats", &url, "--json", "-"]);
    let report = stdout_json(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["config"]["transport"]["kind"], "nats");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&url),
        "the address is not written out"
    );
    let local = stdout_json(&topology(&["--json", "-"]));
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for (row, local) in rows.iter().zip(local["rows"].as_array().unwrap()) {
        let n = row["n"].as_u64().unwrap();
        let formula = match row["topology"].as_str().unwrap() {
            "star" => 2 * (n - 1) * 3,
            _ => n * (n - 1) * 3,
        };
        let nats = &row["nats"];
        assert_eq!(nats["stored"], formula, "{row}");
        assert_eq!(nats["delivered"], formula, "{row}");
        assert_eq!(nats["held"], 0, "every envelope acked: {row}");
        assert_eq!(nats["matches"], true);
        for same in [
            "messages",
            "bytes",
            "tokens",
            "hub_context",
            "worker_context",
        ] {
            assert_eq!(row[same], local[same], "{same}: {row} / {local}");
        }
        assert_eq!(row["repeats_agree"], true);
        assert!(local.get("nats").is_none(), "in process: no NATS counts");
    }
}

#[test]
fn the_csv_gains_the_nats_columns() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    let out = topology(&[
        "--transport",
        "nats",
        "--nats",
        &server.url(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("carried by NATS JetStream"), "{table}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 4..],
        ["nats_stored", "nats_delivered", "nats_held", "nats_match"]
    );
    let col = |name| header.iter().position(|h| *h == name).unwrap();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[col("nats_stored")], f[col("formula_messages")], "{line}");
        assert_eq!(
            f[col("nats_delivered")],
            f[col("formula_messages")],
            "{line}"
        );
        assert_eq!(f[col("nats_match")], "true");
    }
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let out = topology(&["--transport", "nats", "--nats", &url]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connecting to NATS at"), "{err}");
    assert!(out.stdout.is_empty());
}
