//! The `sluice` command: one binary, one subcommand per face.

use clap::{Parser, Subcommand};

/// sluice: rate limiting for HTTP APIs.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
