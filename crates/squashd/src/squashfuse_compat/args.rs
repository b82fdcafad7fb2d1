//! squashfuse's command line, split as libfuse's `fuse_opt_parse` splits it: operands, the
//! FUSE helper's flags (`-h -V -d -f -s`), and `-o` lists (`-o a,b`, `-oa,b`, repeated;
//! a backslash escapes a comma), each option unescaped once into an element of its own. Everything after `--` is an operand. Nothing here knows what
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
                split_list(&line_text(list)?, &mut line.options)?;
            }
            "-h" | "--help" => line.help = true,
            "-V" | "--version" => line.version = true,
            "-d" | "--debug" => line.debug = true,
            "-f" => line.foreground = true,
            "-s" => line.single_thread = true,
            // mount(8)'s "read-only" (the mount always is) and "do not write /etc/mtab",
            // which libfuse takes.
            "-r" | "-n" => {}
            _ if text.starts_with("-o") => split_list(&text[2..], &mut line.options)?,
            _ => line.unknown.push(text.to_string()),
        }
    }
    Ok(line)
}

fn line_text(list: OsString) -> Result<String, String> {
    list.into_string()
        .map_err(|list| format!("the options {list:?} are not UTF-8"))
}

/// Appends the elements of one `-o` list, read as libfuse's `fuse_opt_parse` reads it
/// (`process_real_option_group` in lib/fuse_opt.c, libfuse 3): split on commas, a backslash
/// taking the character after it as it is (`\,` a comma in a value, `\\` a backslash), or with
/// three octal digits, the first 0 to 3, the byte they give (`\054` a comma too); a backslash
/// that ends the list stays. Each element comes out once, unescaped, and is never split again
/// (an escaped comma is part of its value). Empty elements (`-o ""`, `a,,b`) are dropped.
fn split_list(list: &str, out: &mut Vec<String>) -> Result<(), String> {
    let bytes = list.as_bytes();
    let mut current = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b',' => push_element(&mut current, out)?,
            b'\\' if at + 1 < bytes.len() => {
                at += 1;
                match bytes.get(at..at + 3) {
                    Some(&[a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7']) => {
                        current.push((a - b'0') * 0o100 + (b - b'0') * 0o10 + (c - b'0'));
                        at += 2;
                    }
                    _ => current.push(bytes[at]),
                }
            }
            byte => current.push(byte),
        }
        at += 1;
    }
    push_element(&mut current, out)
}

/// Moves the element being read to `out`, unless it is empty.
fn push_element(current: &mut Vec<u8>, out: &mut Vec<String>) -> Result<(), String> {
    let element = std::mem::take(current);
    if element.is_empty() {
        return Ok(());
    }
    let element = String::from_utf8(element).map_err(|e| {
        format!(
            "the option {:?} is not UTF-8 once its escapes are read",
            String::from_utf8_lossy(e.as_bytes())
        )
    })?;
    out.push(element);
    Ok(())
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
        // One element, whose value holds a comma: never a second option.
        let line = parse_str(&["-o", r"subdir=a\,allow_other", r"-osubdir=b\054nodev"]).unwrap();
        assert_eq!(line.options, ["subdir=a,allow_other", "subdir=b,nodev"]);
    }

    #[test]
    fn escapes_as_libfuse_reads_them() {
        for (list, expected) in [
            // Octal: three digits, the first 0 to 3; anything else is the character itself.
            (r"a\101b", vec!["aAb"]),
            (r"a\401", vec!["a401"]),
            (r"a\08", vec!["a08"]),
            (r"\x", vec!["x"]),
            // A backslash that ends the list stays; one before a comma takes the comma.
            (r"a\", vec![r"a\"]),
            (r"a\\,b", vec![r"a\", "b"]),
            (r",\,,", vec![","]),
        ] {
            let line = parse_str(&["-o", list]).unwrap();
            assert_eq!(line.options, expected, "{list}");
        }
        let e = parse_str(&["-o", r"subdir=\377"]).unwrap_err();
        assert!(e.contains("UTF-8"), "{e}");
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
