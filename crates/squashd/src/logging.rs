//! The daemons' log (`squashd mount`, `squashd serve`): to stderr, where journald picks it up.

use std::io::Write;

/// Logs to stderr at the levels `SQUASHD_LOG` gives (`debug`, or per target as in
/// `warn,squashd_fuse=debug`), warnings otherwise. A second call changes nothing.
pub(crate) fn init_logging() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: Targets = std::env::var("SQUASHD_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::WARN));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| OneLineStderr)
                .with_target(false)
                .without_time()
                // No colours: the log goes to the journal, and every escape sequence in an
                // event is escaped on the way out (see OneLineStderr).
                .with_ansi(false)
                // By default a failed write is reported with `eprintln!`, which panics when
                // stderr is a closed pipe (`squashd mount -f 2>&1 | head`): the process then
                // aborted mid-mount and left a dead mount behind.
                .log_internal_errors(false),
        )
        .with(filter)
        .try_init();
}

/// Stderr for the events of `tracing`, which reach it as one formatted line per write: each
/// line is kept to one line as [`log_line!`]'s are (an event's message may hold a path or an
/// error from an image or a user, with newlines or escape sequences in it).
struct OneLineStderr;

impl Write for OneLineStderr {
    fn write(&mut self, event: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(event);
        let (body, newline) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (&*text, ""),
        };
        let line = format!("{}{newline}", crate::quote::one_line(body));
        std::io::stderr().write_all(line.as_bytes())?;
        Ok(event.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
