//! squashfuse's command line, split as libfuse's `fuse_opt_parse` splits it: operands, the
//! FUSE helper's flags (`-h -V -d -f -s`), and `-o` lists (`-o a,b`, `-oa,b`, repeated;
//! a backslash escapes a comma). Everything after `--` is an operand. Nothing here knows what
//! an option means; that is [`super::options`].

use std::ffi::OsString;

/// The command line, split.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct CommandLine {
    /// ARCHIVE and MOUNTPOINT (or fewer, or more: the caller checks).
    pub(super) operands: Vec<OsString>,
    /// `-h`, `--help`.
    pub(super) help: bool,
    /// `-V`, `--version`.
    pub(super) version: bool,
    /// `-d`, `--debug`: debug output, in the foreground.
    pub(super) debug: bool,
    /// `-f`: stay in the foreground.
    pub(super) foreground: bool,
    /// `-s`: one thread.
    pub(super) single_thread: bool,
    /// The elements of every `-o` list, in order.
    pub(super) options: Vec<String>,
    /// Flags libfuse would not know, as given (`-x`).
    pub(super) unknown: Vec<String>,
}

/// Splits `args` (without the program name). An error is a usage error, said in one line.
pub(super) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<CommandLine, String> {
    let mut line = CommandLine::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let bytes = arg.as_encoded_bytes();
        if bytes.first() != Some(&b'-') {
            line.operands.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            return Err(format!("unknown option {arg:?}"));
        };
        match text {
            "--" => {
                line.operands.extend(args.by_ref());
                break;
            }
            "-o" => {
                let list = args
                    .next()
                    .ok_or_else(|| "missing argument after `-o'".to_string())?;
                split_list(&line_text(list)?, &mut line.options);
            }
            "-h" | "--help" => line.help = true,
            "-V" | "--version" => line.version = true,
            "-d" | "--debug" => line.debug = true,
            "-f" => line.foreground = true,
            "-s" => line.single_thread = true,
            // mount(8)'s "read-only" (the mount always is) and "do not write /etc/mtab",
            // which libfuse takes.
            "-r" | "-n" => {}
            _ if text.starts_with("-o") => split_list(&text[2..], &mut line.options),
            _ => line.unknown.push(text.to_string()),
        }
    }
    Ok(line)
}

fn line_text(list: OsString) -> Result<String, String> {
    list.into_string()
        .map_err(|list| format!("the options {list:?} are not UTF-8"))
}

/// Appends the elements of one `-o` list: split on commas, `\,` and `\\` standing for `,` and
/// `\` as libfuse reads them; empty elements (`-o ""`, `a,,b`) are dropped.
fn split_list(list: &str, out: &mut Vec<String>) {
    let mut current = String::new();
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ',' => out.extend(Some(std::mem::take(&mut current)).filter(|o| !o.is_empty())),
            c => current.push(c),
        }
    }
    out.extend(Some(current).filter(|o| !o.is_empty()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<CommandLine, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn operands_flags_and_option_lists() {
        let line = parse_str(&[
            "-f",
            "-o",
            "offset=4096,uid=5",
            "img.sqfs",
            "-ogid=7",
            "-s",
            "-o",
            "",
            "mnt",
            "-d",
            "-x",
        ])
        .unwrap();
        assert_eq!(line.operands, ["img.sqfs", "mnt"]);
        assert_eq!(line.options, ["offset=4096", "uid=5", "gid=7"]);
        assert!(line.foreground && line.single_thread && line.debug);
        assert!(!line.help && !line.version);
        assert_eq!(line.unknown, ["-x"]);
    }

    #[test]
    fn double_dash_ends_the_options() {
        let line = parse_str(&["--", "-image", "-f"]).unwrap();
        assert_eq!(line.operands, ["-image", "-f"]);
        assert!(!line.foreground);
    }

    #[test]
    fn escaped_commas_stay_in_the_value() {
        let line = parse_str(&["-o", r"subdir=a\,b,fsname=x\\y,,allow_other"]).unwrap();
        assert_eq!(line.options, [r"subdir=a,b", r"fsname=x\y", "allow_other"]);
    }

    #[test]
    fn a_missing_option_list_is_a_usage_error() {
        let e = parse_str(&["img", "mnt", "-o"]).unwrap_err();
        assert!(e.contains("-o"), "{e}");
    }

    #[test]
    fn help_and_version() {
        assert!(parse_str(&["--help"]).unwrap().help);
        assert!(parse_str(&["-V"]).unwrap().version);
    }
}
