//! A lone mount served through FUSE, once mounted (and detached from its caller): its control
//! socket, signals, readiness and prefetch, until it is unmounted. Also where a kernel-path
//! mount that the kernel refused falls back to when squashd chose the path.

use super::{announce_ready, watch_signals, LoneMount};
use crate::control::report::Probe;
use crate::daemonize::WaitingParent;
use crate::notify_pipe::Outcome;
use crate::readiness::root_answers;
use anyhow::Context;
use squashd_fuse::MountedImage;
use std::time::Duration;

/// Serves `mounted` until it is unmounted; tells `parent` (a caller waiting in the
/// foreground) once it answers.
pub(super) fn serve(
    lone: LoneMount,
    mounted: MountedImage,
    parent: Option<WaitingParent>,
) -> anyhow::Result<()> {
    let mountpoint = mounted.mountpoint().to_path_buf();
    let mut serving = lone.start_serving(Probe::Fuse(mounted.probe()), &mountpoint)?;
    let signal_unmounter = mounted.unmounter();
    watch_signals(move |lazy| signal_unmounter.unmount(lazy))?;
    let unmounter = mounted.unmounter();
    let (ready_fd, notify_pipe) = (serving.ready_fd.take(), serving.notify_pipe.clone());
    std::thread::Builder::new()
        .name("readiness".into())
        .spawn(move || {
            if root_answers(&mountpoint, Duration::from_secs(30)) {
                announce_ready(ready_fd, parent, notify_pipe);
            } else {
                log_line!(
                    "squashd: {}: the mount does not answer",
                    mountpoint.display()
                );
                // Here, not on a thread of its own: the process ends with the unmount.
                if let Some(pipe) = notify_pipe {
                    crate::notify_pipe::tell(&pipe, Outcome::Failed);
                }
                let _ = unmounter.unmount(true);
            }
        })?;
    mounted.run().context("serving the mount")?;
    Ok(())
}
