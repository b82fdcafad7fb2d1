//! `squashd generate-assets`: the man pages and shell completions the Debian package installs,
//! checked against what `squashd --help` says, rendered by the real man and loaded by the real
//! bash. (packaging/test-deb.sh checks them again as the package installs them.)

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn squashd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_squashd"))
        .args(args)
        .output()
        .expect("run squashd");
    assert!(out.status.success(), "squashd {args:?} failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The subcommands `squashd --help` lists, without clap's `help`.
fn listed_subcommands() -> Vec<String> {
    let help = squashd(&["--help"]);
    let commands = help
        .split("Commands:\n")
        .nth(1)
        .expect("a Commands: section");
    commands
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn generate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_str().expect("utf-8 temp path");
    let printed = squashd(&["generate-assets", path]);
    assert!(printed.contains("/man"), "{printed}");
    dir
}

/// The text man renders from a page: one line per paragraph (wide, plain ASCII), and what it
/// said on stderr (groff's warnings).
fn render(page: &Path) -> (String, String) {
    let out = Command::new("man")
        .args(["--warnings=all", "-l"])
        .arg(page)
        .env("LC_ALL", "C")
        .env("MANWIDTH", "1000")
        .output()
        .expect("run man");
    assert!(out.status.success(), "man -l {}", page.display());
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_man_page_per_listed_subcommand_and_none_for_hidden_ones() {
    let dir = generate();
    let pages: BTreeSet<String> = std::fs::read_dir(dir.path().join("man"))
        .expect("man/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let subcommands = listed_subcommands();
    assert!(subcommands.iter().any(|s| s == "mount"), "{subcommands:?}");
    let mut expected: BTreeSet<String> = subcommands
        .iter()
        .map(|s| format!("squashd-{s}.1"))
        .collect();
    expected.insert("squashd.1".to_string());
    assert_eq!(pages, expected);
}

#[test]
fn pages_render_without_warnings_and_say_what_help_says() {
    if Command::new("man").arg("-w").arg("man").output().is_err() {
        testkit::skip("man is not installed (apt-get install man-db)");
        return;
    }
    let dir = generate();
    for sub in listed_subcommands() {
        let page = dir.path().join(format!("man/squashd-{sub}.1"));
        let (text, warnings) = render(&page);
        assert!(warnings.is_empty(), "{}: {warnings}", page.display());
        // The NAME line is the first line of `squashd SUB --help`, without its period.
        let help = squashd(&[&sub, "--help"]);
        let about = help.lines().next().expect("about line");
        let name_line = format!("squashd-{sub} - {}", about.trim_end_matches('.'));
        assert!(
            text.contains(&name_line),
            "{sub}: no {name_line:?} in\n{text}"
        );
        // Every long option of the help is documented on the page.
        for word in help.split_whitespace() {
            if let Some(rest) = word.strip_prefix("--") {
                let long: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                assert!(
                    text.contains(&format!("--{long}")),
                    "{sub}: --{long} missing"
                );
            }
        }
        for section in ["SYNOPSIS", "EXIT STATUS", "SEE ALSO"] {
            assert!(text.contains(section), "{sub}: no {section}");
        }
    }
    // Each mount option of `squashd mount --help` is an item of the page's option list.
    let (mount_page, _) = render(&dir.path().join("man/squashd-mount.1"));
    let mount_help = squashd(&["mount", "--help"]);
    let (_, table) = mount_help
        .split_once("\nMount options (-o")
        .expect("the -o table");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(rows.len() > 10, "{table}");
    for row in rows {
        let head = row.split_whitespace().next().expect("option name");
        assert!(
            mount_page.contains(&format!("\n       {head}")),
            "mount option {head} is not an item of squashd-mount(1)"
        );
    }
}

#[test]
fn bash_completes_visible_subcommands_and_their_options_only() {
    let dir = generate();
    let script = dir.path().join("completions/squashd.bash");
    // What bash offers for the words given (the last one being completed).
    let complete = |words: &str| -> String {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {} && COMP_WORDS=({words}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && \
                 _squashd squashd \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\" && \
                 echo \"${{COMPREPLY[*]}}\"",
                script.display()
            ))
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(complete("squashd mo"), "mount");
    assert_eq!(complete("squashd st"), "stat status");
    assert!(complete("squashd mount --r").contains("--ready-fd"));
    // The hidden subcommands are not offered.
    assert_eq!(complete("squashd wa"), "");
    assert_eq!(complete("squashd gen"), "");
    for (shell, file) in [("zsh", "_squashd"), ("fish", "squashd.fish")] {
        match Command::new(shell)
            .arg("-n")
            .arg(dir.path().join("completions").join(file))
            .status()
        {
            Ok(status) => assert!(status.success(), "{shell} -n {file}"),
            Err(_) => testkit::skip(&format!("{shell} is not installed: {file} not parsed")),
        }
    }
}
