//! `sluice completions SHELL` and `sluice man`: what a package installs beside the binary,
//! generated from the command line's own definition so they never fall behind it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::CommandFactory;

/// The subcommands that describe the command line itself.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout, or write one page per subcommand into a directory.
    Man {
        /// Write sluice.1, sluice-serve.1, ... into this directory instead of printing sluice.1.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Runs `completions` or `man`. The text is built first and written in one go: a reader that
/// stops early (`| head`) ends the output quietly, as it would for `cat`.
pub fn run(command: Command) -> anyhow::Result<()> {
    let mut cli = crate::Cli::command();
    let mut text = Vec::new();
    match command {
        Command::Completions { shell } => {
            let name = cli.get_name().to_owned();
            clap_complete::generate(shell, &mut cli, name, &mut text);
        }
        Command::Man { dir: None } => {
            clap_mangen::Man::new(cli).render(&mut text).context("rendering the manual page")?
        }
        Command::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cli, &dir)
                .with_context(|| format!("writing manual pages into {}", dir.display()))?;
            writeln!(text, "manual pages written to {}", dir.display())?;
        }
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(&text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}
