//! Whether a fresh mount answers: the attach probe.

use crate::readiness::root_answers;
use squashd_fuse::MountOwner;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// How long an attach waits for a fresh mount to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the new mount on `mountpoint` answers within the timeout
/// ([`crate::readiness::root_answers`]: its root stats and lists), asked on a helper thread.
///
/// The root's listing stays in the kernel's cache: listing all 69 E3 roots after READY=1 costs
/// no round trip, and ready-and-listed took 58 ms instead of 68 (medians of 6).
///
/// A mount made for a user (`owner`) is probed with that user's rights: the kernel refuses
/// root a user's mount made without `allow_other`.
pub(super) fn answers(mountpoint: &Path, owner: Option<MountOwner>) -> bool {
    if let Some(owner) = owner {
        return super::as_user::answers(owner, mountpoint, ANSWER_TIMEOUT);
    }
    for _ in 0..2 {
        let (reply, report) = mpsc::channel();
        let sent = PROBER.with_borrow_mut(|prober| {
            if prober.is_none() {
                *prober = Prober::spawn().ok();
            }
            let sent = prober
                .as_ref()
                .is_some_and(|p| p.jobs.send((mountpoint.to_path_buf(), reply)).is_ok());
            if !sent {
                // Its thread is gone (or could not start): the next try starts another.
                *prober = None;
            }
            sent
        });
        if !sent {
            continue;
        }
        let report = report.recv_timeout(ANSWER_TIMEOUT + Duration::from_secs(1));
        if report.is_err() {
            // Stuck in a stat of a mount that will be torn down: leave it there, and give
            // the next attach a new helper.
            PROBER.with_borrow_mut(|prober| *prober = None);
        }
        return report == Ok(true);
    }
    false
}

/// A helper thread that probes new mounts for the thread that attaches them, so that a mount
/// that never answers cannot hang the attaching thread. Each attaching thread keeps its helper
/// for its next attach: 69 images at boot start a few helpers rather than 69 threads (each a
/// stack, a signal stack, and an unmap that interrupts the other CPUs when it ends). A helper
/// ends when its attaching thread does.
struct Prober {
    jobs: mpsc::Sender<(PathBuf, mpsc::Sender<bool>)>,
}

thread_local! {
    static PROBER: std::cell::RefCell<Option<Prober>> = const { std::cell::RefCell::new(None) };
}

impl Prober {
    fn spawn() -> std::io::Result<Prober> {
        let (jobs, queue) = mpsc::channel::<(PathBuf, mpsc::Sender<bool>)>();
        std::thread::Builder::new()
            .name("attach-probe".into())
            .spawn(move || {
                for (path, reply) in queue {
                    let _ = reply.send(root_answers(&path, ANSWER_TIMEOUT));
                }
            })?;
        Ok(Prober { jobs })
    }
}
