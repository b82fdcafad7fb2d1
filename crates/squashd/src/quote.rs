//! How names that come from users and images are shown in the log and in tables: a mount
//! point or image path is chosen by whoever attaches it, and a name may hold a newline (which
//! would forge a log line of its own) or a terminal escape sequence (which would drive the
//! terminal of whoever reads the log or the `status` table).
//!
//! The escapes are Rust's (`{:?}`): `\n`, `\t`, `\u{1b}` for ESC, `\u{202e}` for a bidi
//! override, `\xFF` for a byte that is not UTF-8. They cover every control and invisible
//! formatting character, not only the ASCII ones, and read the same in the log as in the
//! messages of the Rust tools beside squashd. A name with nothing to escape is shown as it is,
//! as before; one with anything to escape is shown whole in double quotes, with `"` and `\`
//! escaped as well, so the two never look alike (a plain name never holds a `"` or a `\`).
//! `ls`'s shell quoting (`'m'$'\n''x'`) was the other candidate: it is made for pasting into a
//! shell, which neither the log nor the table is, and is harder to read.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::path::Path;

/// A path shown for the log or a table: as it is when it needs no escape, else quoted and
/// escaped (see the module's doc). Pads like a string (`{:<30}`).
pub(crate) struct QuotedPath<'a>(&'a OsStr);

/// The path `path` as the log and tables show it.
pub(crate) fn path(path: &Path) -> QuotedPath<'_> {
    QuotedPath(path.as_os_str())
}

impl fmt::Display for QuotedPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.to_str() {
            Some(plain) if !needs_escape(plain) => f.pad(plain),
            _ => f.pad(&format!("{:?}", self.0)),
        }
    }
}

/// Whether `text` holds anything `{:?}` escapes: its escapes are always longer than what they
/// stand for, so the quoted form is longer than the text and its two quotes exactly when so.
fn needs_escape(text: &str) -> bool {
    format!("{text:?}").len() != text.len() + 2
}

/// `line` with every character a terminal or a log reader would act on escaped as `{:?}`
/// does (newlines, ESC and other controls, bidi overrides), and everything else, quotes and
/// backslashes included, as it is: the last guard of the log, which keeps each message on one
/// line whatever was put into it (an error's text may carry a path that nobody quoted).
pub(crate) fn one_line(line: &str) -> Cow<'_, str> {
    let acted_on = |c: char| !matches!(c, '"' | '\'' | '\\') && c.escape_debug().len() > 1;
    if !line.chars().any(acted_on) {
        return Cow::Borrowed(line);
    }
    let mut escaped = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if acted_on(c) {
            escaped.extend(c.escape_debug());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn shown(bytes: &[u8]) -> String {
        path(Path::new(OsStr::from_bytes(bytes))).to_string()
    }

    #[test]
    fn plain_names_are_shown_as_they_are() {
        assert_eq!(shown(b"/srv/images/base 1.sqfs"), "/srv/images/base 1.sqfs");
        assert_eq!(shown("/mnt/café".as_bytes()), "/mnt/café");
        assert_eq!(format!("[{:<8}]", path(Path::new("/m"))), "[/m      ]");
    }

    #[test]
    fn controls_escapes_and_bad_bytes_are_quoted() {
        assert_eq!(
            shown(b"/m\nsquashd serve: x\x1b[31m"),
            r#""/m\nsquashd serve: x\u{1b}[31m""#
        );
        assert_eq!(shown(b"/m/\xff\xfe"), r#""/m/\xFF\xFE""#);
        assert_eq!(
            shown("/m/\u{202e}gpj.exe".as_bytes()),
            r#""/m/\u{202e}gpj.exe""#
        );
        // A name that looks like a quoted one is quoted itself, so the two differ.
        assert_eq!(shown(br#""/m\n""#), r#""\"/m\\n\"""#);
    }

    #[test]
    fn a_log_line_keeps_to_one_line() {
        assert_eq!(one_line("attached /a on /b"), "attached /a on /b");
        assert_eq!(
            one_line("attached \"/a\" on /b\nsquashd serve: x\x1b[31m\r"),
            "attached \"/a\" on /b\\nsquashd serve: x\\u{1b}[31m\\r"
        );
        assert_eq!(one_line("é \u{85}"), "é \\u{85}");
    }
}
