//! `squashd generate-assets DIR` (hidden from --help): the man pages and shell completions a
//! package installs, made from the same clap definitions that parse the command line, so they
//! cannot drift from it. packaging/build-deb.sh runs it; a manual install can too.
//!
//! DIR/man/ gets squashd.1 and one page per visible subcommand (squashd-mount.1, ...);
//! DIR/completions/ gets squashd.bash, _squashd (zsh) and squashd.fish.

use anyhow::Context;
use clap_complete::aot::{generate, Shell};
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `squashd generate-assets`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The directory to write man/ and completions/ into (created if missing).
    dir: PathBuf,
}

/// Writes the man pages and completions of `cli` (the whole `squashd` command) under `args.dir`.
pub fn run(args: Args, cli: clap::Command) -> anyhow::Result<()> {
    // `help` is a pseudo-command of clap's, not worth a page or a completion of its own.
    let mut cli = cli.disable_help_subcommand(true);
    // Gives each subcommand its display name (squashd-mount), which names its page.
    cli.build();
    let man_dir = args.dir.join("man");
    let completion_dir = args.dir.join("completions");
    for dir in [&man_dir, &completion_dir] {
        fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    }
    let exit_status = exit_status_text(&cli);
    let pages: Vec<&clap::Command> = cli.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    let sub_names: Vec<String> = pages.iter().map(|c| page_name(c)).collect();
    write_page(&man_dir, &cli, &exit_status, &sub_names, true)?;
    for sub in pages {
        write_page(&man_dir, sub, &exit_status, &["squashd".to_string()], false)?;
    }
    let shown = without_hidden(&cli);
    for (shell, file) in [
        (Shell::Bash, "squashd.bash"),
        (Shell::Zsh, "_squashd"),
        (Shell::Fish, "squashd.fish"),
    ] {
        let mut text = Vec::new();
        generate(shell, &mut shown.clone(), "squashd", &mut text);
        write_file(&completion_dir.join(file), &text)?;
    }
    println!("{}", man_dir.display());
    println!("{}", completion_dir.display());
    Ok(())
}

/// The command as completions offer it: clap_complete's bash and fish generators would offer
/// hidden subcommands too, and clap cannot remove a subcommand, so the root is made anew with
/// the visible ones.
fn without_hidden(cli: &clap::Command) -> clap::Command {
    let mut shown = clap::Command::new("squashd")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .disable_help_subcommand(true)
        .subcommands(cli.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    if let Some(about) = cli.get_about() {
        shown = shown.about(about.clone());
    }
    shown
}

/// The page's name: `squashd`, or `squashd-mount` for a subcommand.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name().unwrap_or(cmd.get_name()).to_string()
}

/// The exit codes, which hold for every subcommand: the top-level after-help says them.
fn exit_status_text(cli: &clap::Command) -> String {
    let text = cli
        .get_after_help()
        .map(|t| t.to_string())
        .unwrap_or_default();
    text.strip_prefix("Exit status:")
        .unwrap_or(&text)
        .trim()
        .to_string()
}

/// One page: clap_mangen's sections, then the after-help as NOTES (its option table as a list),
/// EXIT STATUS, and SEE ALSO naming the related pages.
fn write_page(
    dir: &Path,
    cmd: &clap::Command,
    exit_status: &str,
    see_also: &[String],
    top: bool,
) -> anyhow::Result<()> {
    let man = Man::new(cmd.clone())
        .manual("squashd manual")
        .source(concat!("squashd ", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if top {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    if !top {
        if let Some(notes) = cmd.get_after_help() {
            roff.control("SH", ["NOTES"]);
            notes_section(&mut roff, &notes.to_string());
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(exit_status)]);
    roff.control("SH", ["SEE ALSO"]);
    let refs: Vec<String> = see_also.iter().map(|name| format!("{name}(1)")).collect();
    roff.text([roman(refs.join(", "))]);
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    write_file(&dir.join(man.get_filename()), &out)
}

/// An after-help text as roff: blank lines part paragraphs; lines indented by two spaces are
/// the rows of a table (`name=VALUE   what it does`), set as a tagged list so that man can
/// wrap them, which the aligned columns of --help would not survive.
fn notes_section(roff: &mut Roff, text: &str) {
    for block in text.split("\n\n") {
        roff.control("PP", []);
        for line in block.lines() {
            match line.strip_prefix("  ") {
                Some(row) => {
                    let row = row.trim_start();
                    let (head, body) = row.split_once("  ").unwrap_or((row, ""));
                    roff.control("TP", []);
                    roff.text([bold(head)]);
                    roff.text([roman(body.trim_start())]);
                }
                None => {
                    roff.text([roman(line)]);
                }
            }
        }
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    fs::File::create(path)
        .and_then(|mut f| f.write_all(bytes))
        .with_context(|| format!("{}: cannot write", path.display()))
}
