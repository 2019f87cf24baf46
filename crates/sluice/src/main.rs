//! The `sluice` command: one binary, one subcommand per face.

use clap::{Parser, Subcommand};

mod check_config;
mod completions;
mod key_hash;
mod replay;
mod serve;
mod simulate;
mod traffic;

/// The binary's allocator. A proxied request allocates and frees a few dozen small blocks (header
/// values, maps, buffers), mostly on the thread that serves it; with glibc's allocator these
/// cost about 2,200 instructions per proxied request (bench/instructions.sh under callgrind).
/// The libraries do not choose: an application embedding them keeps its own allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sluice: rate limiting for HTTP APIs.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service: the default demo service, or a gateway with --config.
    Serve(serve::Args),
    /// Validate a configuration and print the resolved routes and policies.
    CheckConfig(check_config::Args),
    /// The key hashes a gateway gives a client (what decision lines and the status page show).
    KeyHash(key_hash::Args),
    /// Run the algorithms side by side over generated or recorded arrivals, in virtual time.
    Simulate(simulate::Args),
    /// Send real HTTP requests on the arrival times of a scenario or a file, and summarise the answers.
    Replay(replay::Args),
    #[command(flatten)]
    Describe(completions::Command),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(matches!(&cli.command, Command::Serve(_)));
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("sluice: {e:#}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            std::process::ExitCode::FAILURE
        }
    }
}

/// `serve` (the gateway and the seed service) logs JSON lines to stdout: decision lines and
/// service events (start, reload, store failure, stop), which `RUST_LOG` cannot silence below
/// `info` (`[decision_log]` governs decision lines). Other subcommands log text to stderr.
/// `RUST_LOG` filters (default `info`).
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
        let filter = [sluice_gateway::observe::EVENT_TARGET, sluice_gateway::observe::DECISION_TARGET]
            .iter()
            .filter_map(|target| format!("{target}=info").parse().ok())
            .fold(filter, |f, directive| f.add_directive(directive));
        let subscriber = sluice_gateway::observe::json_lines(std::io::stdout, filter);
        let _ = tracing::subscriber::set_global_default(subscriber);
    } else {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::CheckConfig(args) => check_config::run(args),
        Command::KeyHash(args) => key_hash::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Describe(c) => completions::run(c),
    }
}
