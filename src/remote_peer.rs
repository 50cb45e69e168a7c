//! `quorate peer`: one peer of a peer-mode plan as a process, over etcd and NATS
//! (docs/distributed.md, "Peer processes"). Without the cargo features `etcd` and `nats` it
//! says so and exits 2.

use std::path::PathBuf;
use std::process::ExitCode;

use quorate::runner::{Approve, FileRun};

/// `quorate peer`'s flags.
#[derive(clap::Args, Debug)]
#[cfg_attr(not(all(feature = "etcd", feature = "nats")), allow(dead_code))]
pub(crate) struct PeerCli {
    /// The NATS JetStream server (nats://HOST:PORT).
    #[arg(long, value_name = "URL")]
    nats: String,
    /// The etcd cluster the peers share: etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
    #[arg(long, value_name = "STORE")]
    store: String,
    /// The run (a uuid; every peer of the run is given the same).
    #[arg(long, value_name = "RUN")]
    run: String,
    /// The plan file (topology = "peer"; every peer is given the same).
    #[arg(long, value_name = "PLAN")]
    plan: PathBuf,
    /// How many peers run the plan (this one included).
    #[arg(long, value_name = "N")]
    peers: usize,
    /// This peer's agent id (a uuid); random if absent.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// Print this peer's part of the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// Answer approval requests: all, none, or a comma-separated list of task ids to approve.
    #[arg(long)]
    approve: Option<Approve>,
    /// How long to wait for the other peers to join (exit 9 after).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    wait_ms: u64,
    /// The time to live of this peer's etcd lease, rounded up to whole seconds: a peer that
    /// dies holds its claimed task this long before another peer takes it over.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    lease_ms: u64,
    /// TLS and credentials for NATS and etcd.
    #[command(flatten)]
    security: quorate::security::SecurityArgs,
}

const EXIT_BAD_INPUT: u8 = 2;

/// Runs one peer; its part of the run, or the exit code after a message.
#[cfg(not(all(feature = "etcd", feature = "nats")))]
pub(crate) fn peer(_: &PeerCli) -> Result<FileRun, ExitCode> {
    eprintln!(
        "quorate: peer needs a quorate built with the cargo features `etcd` and `nats` \
         (cargo build --features etcd,nats)"
    );
    Err(ExitCode::from(EXIT_BAD_INPUT))
}

/// Runs one peer; its part of the run, or the exit code after a message.
#[cfg(all(feature = "etcd", feature = "nats"))]
pub(crate) fn peer(cli: &PeerCli) -> Result<FileRun, ExitCode> {
    use quorate::process::parse_id;
    use quorate::process::peer::{run_peer_process, PeerArgs};
    use quorate::runner::RunArgs;
    let fail = |message: String, code: u8| {
        eprintln!("quorate: {message}");
        ExitCode::from(code)
    };
    let bad = |message: String| fail(message, EXIT_BAD_INPUT);
    let run = parse_id(&cli.run).map_err(|e| bad(format!("--run: {e}")))?;
    let id = cli
        .id
        .as_deref()
        .map(parse_id)
        .transpose()
        .map_err(|e| bad(format!("--id: {e}")))?;
    let store = cli
        .store
        .parse()
        .map_err(|e| bad(format!("--store {}: {e}", cli.store)))?;
    if cli.peers == 0 {
        return Err(bad("--peers must be at least 1".into()));
    }
    let security = cli.security.resolve().map_err(|e| bad(e.to_string()))?;
    let args = PeerArgs {
        nats: cli.nats.clone(),
        store,
        run,
        plan: cli.plan.clone(),
        peers: cli.peers,
        id,
        wait: std::time::Duration::from_millis(cli.wait_ms),
        lease: std::time::Duration::from_millis(cli.lease_ms),
        security,
    };
    let run_args = RunArgs {
        approve: cli.approve.clone().unwrap_or_default(),
        ..RunArgs::default()
    };
    match run_peer_process(&args, &run_args) {
        Ok(done) => {
            let r = &done.run.output.report;
            let ran = r.tasks.iter().filter(|t| t.attempts > 0).count();
            eprintln!(
                "quorate: peer {} of {}: run {} stopped {}; {ran} tasks ran here, {} effects \
                 committed here, fenced off {} times",
                done.index,
                done.peers.len(),
                r.run_id,
                r.stop_reason.as_deref().unwrap_or("-"),
                done.run.world.effects().len(),
                done.fenced
            );
            Ok(done.run)
        }
        Err(e) => Err(fail(e.to_string(), e.exit_code())),
    }
}
