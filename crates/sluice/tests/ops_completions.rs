//! `sluice completions SHELL` and `sluice man`: generated from the command line itself, they
//! name every subcommand; the bash script completes for real in bash, and the manual pages
//! render with `man`.

mod ops_support;
mod support;

#[cfg(feature = "external-programs")]
use ops_support::require;
use ops_support::{SLUICE, run};
#[cfg(feature = "external-programs")]
use support::TempDir;

const SUBCOMMANDS: [&str; 7] = ["serve", "check-config", "key-hash", "simulate", "replay", "completions", "man"];

fn sluice(args: &[&str]) -> String {
    let (ok, out, err) = run(SLUICE, args);
    assert!(ok, "sluice {args:?} failed: {err}");
    out
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_subcommand() {
    for (shell, marker) in [("bash", "complete -F _sluice"), ("zsh", "#compdef sluice"), ("fish", "complete -c sluice")]
    {
        let script = sluice(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completion does not know `{sub}`");
        }
        // Options of a subcommand too (fish spells them `-l config`).
        let option = |name: &str| script.contains(&format!("--{name}")) || script.contains(&format!("-l {name}"));
        assert!(option("config") && option("drain"), "{shell}: serve's options");
    }
}

#[cfg(feature = "external-programs")]
#[test]
fn the_bash_completion_completes_in_bash() {
    require("bash", "--version", "apt-get install bash");
    let dir = TempDir::new("completions");
    let script = dir.write("sluice.bash", &sluice(&["completions", "bash"]));
    let (ok, _, err) = run("bash", &["-n", &script]);
    assert!(ok, "the script is not valid bash: {err}");
    // What bash does on `sluice s<TAB>` and `sluice serve --c<TAB>`.
    let complete = |words: &str, cword: usize| {
        let cur = words.split(' ').nth(cword).unwrap_or("");
        let prev = words.split(' ').nth(cword.saturating_sub(1)).unwrap_or("");
        let program = format!(
            "source {script}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
             _sluice sluice '{cur}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let (ok, out, err) = run("bash", &["-c", &program]);
        assert!(ok, "{err}");
        out.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let subs = complete("sluice s", 1);
    assert!(subs.contains(&"serve".to_owned()) && subs.contains(&"simulate".to_owned()), "{subs:?}");
    assert!(!subs.contains(&"replay".to_owned()), "{subs:?}");
    assert!(complete("sluice serve --c", 2).contains(&"--config".to_owned()));
}

#[test]
fn an_unknown_shell_is_refused_with_the_known_ones() {
    let (ok, _, err) = run(SLUICE, &["completions", "tcsh"]);
    assert!(!ok);
    assert!(err.contains("bash") && err.contains("zsh") && err.contains("fish"), "{err}");
}

#[cfg(feature = "external-programs")]
#[test]
fn the_manual_page_lists_every_subcommand_and_renders() {
    let page = sluice(&["man"]);
    assert!(page.contains(".TH sluice 1"), "not a roff manual page");
    for sub in SUBCOMMANDS {
        assert!(page.contains(&format!("sluice\\-{}(1)", sub.replace('-', "\\-"))), "no {sub} in SUBCOMMANDS");
    }
    let dir = TempDir::new("man");
    let out = sluice(&["man", "--dir", &dir.path("man1")]);
    assert!(out.contains("manual pages written"), "{out}");
    for sub in SUBCOMMANDS {
        let file = dir.dir().join(format!("man1/sluice-{sub}.1"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{sub}");
    }
    require("man", "--version", "apt-get install man-db");
    let serve = dir.path("man1/sluice-serve.1");
    let (ok, rendered, err) = run("man", &["-l", "-P", "cat", &serve]);
    assert!(ok, "man -l failed: {err}");
    assert!(rendered.contains("ADMIN_PORT") && rendered.contains("--drain"), "{rendered}");
}
