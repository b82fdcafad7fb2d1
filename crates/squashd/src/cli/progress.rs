//! Progress of the offline tools on a terminal: what a remote image's fetching has cost so far
//! (a line kept up to date while the command runs), beside extraction's own bar. Nothing is
//! drawn when stderr is not a terminal.

use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use squashd_remote::RemoteSource;
use std::io::IsTerminal as _;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

fn bars() -> &'static MultiProgress {
    static BARS: OnceLock<MultiProgress> = OnceLock::new();
    BARS.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// The fetch line, cleared when the command ends.
static FETCH_LINE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Shows a bar among the command's others (so that lines do not overwrite each other).
pub fn add(bar: ProgressBar) -> ProgressBar {
    bars().add(bar)
}

/// Keeps a line on stderr saying what fetching `source` has cost, while the command runs.
pub fn show_fetching(source: RemoteSource) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let line = bars().add(ProgressBar::new_spinner());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        line.set_style(style);
    }
    let shown = line.clone();
    *FETCH_LINE.lock().unwrap_or_else(PoisonError::into_inner) = Some(line);
    let _ = std::thread::Builder::new()
        .name("fetch-progress".into())
        .spawn(move || {
            while !shown.is_finished() {
                let stats = source.stats();
                shown.set_message(format!(
                    "{}: fetched {} in {} requests ({} retries), waited {:.1} s",
                    source.name(),
                    HumanBytes(stats.bytes_fetched),
                    stats.requests,
                    stats.retries,
                    Duration::from_nanos(stats.wait_ns).as_secs_f64()
                ));
                shown.tick();
                std::thread::sleep(Duration::from_millis(200));
            }
        });
}

/// Clears the fetch line: the command is done.
pub fn finish() {
    if let Some(line) = FETCH_LINE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        line.finish_and_clear();
    }
}
