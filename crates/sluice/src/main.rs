//! The `sluice` command: one binary, one subcommand per face.

use clap::{Parser, Subcommand};

mod check_config;
mod serve;
mod simulate;
mod stores;

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
    /// Run the algorithms side by side over generated or recorded arrivals, in virtual time.
    Simulate(simulate::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `RUST_LOG` filters them (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::CheckConfig(args) => check_config::run(args),
        Command::Simulate(args) => simulate::run(args),
    }
}
