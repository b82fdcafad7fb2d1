//! How many connections of the control socket are served at once, per uid and in all. Each
//! one served holds a thread for as long as its request takes (an attach waits for its mount
//! to answer), so without a bound any local user could use up the daemon's threads, and root's
//! requests would then find none (issue 23, item 5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Connections served at once in all. Each is a thread (a stack of 2 MiB reserved, a few KiB
/// touched) for as long as its request takes: 128 stays far below any sensible task limit of
/// the unit, and covers a boot that attaches dozens of images from as many `squashd attach`
/// at once (69 images loop-mounted at boot is the case that squashd's daemon was made for).
pub(crate) const MAX_CONNECTIONS: usize = 128;

/// Of [`MAX_CONNECTIONS`], how many only root and the daemon's own user may use: however many
/// connections users hold, root can still attach, detach and ask for the status. Two dozen
/// requests of root's at once is more than an operator or a unit's start needs at the moment
/// users are at their limit.
pub(crate) const RESERVED_FOR_PRIVILEGED: usize = 32;

/// Connections served at once for one uid other than root's or the daemon's: a user's
/// interactive commands, or a script attaching a few images at once, never need more, and
/// twelve users at the limit still leave root its reserved share.
pub(crate) const MAX_PER_USER: usize = 8;

/// The counts of connections being served, by uid.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    served: Mutex<Served>,
}

#[derive(Debug, Default)]
struct Served {
    /// Every connection being served.
    all: usize,
    /// Those of users other than root and the daemon's own.
    unprivileged: usize,
    /// Each unprivileged uid's.
    by_uid: HashMap<u32, usize>,
}

/// A connection being served: it counts against its uid's and the daemon's limits until
/// dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    /// The uid counted, when an unprivileged one.
    user: Option<u32>,
}

impl Admission {
    fn served(&self) -> MutexGuard<'_, Served> {
        // The counts are changed in one step each: a panic elsewhere leaves them consistent.
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection of `uid` (`privileged` for root and the daemon's own user), or
    /// says why not in a line for the client.
    pub(crate) fn admit(self: &Arc<Self>, uid: u32, privileged: bool) -> Result<Ticket, String> {
        let mut served = self.served();
        if privileged {
            if served.all >= MAX_CONNECTIONS {
                return Err(format!(
                    "too many connections at once ({MAX_CONNECTIONS} being served): try again when some have finished"
                ));
            }
        } else {
            let own = served.by_uid.get(&uid).copied().unwrap_or(0);
            if own >= MAX_PER_USER {
                return Err(format!(
                    "too many connections at once from uid {uid} ({MAX_PER_USER} being served): try again when some have finished"
                ));
            }
            let users_may_use = MAX_CONNECTIONS - RESERVED_FOR_PRIVILEGED;
            if served.unprivileged >= users_may_use || served.all >= MAX_CONNECTIONS {
                return Err(format!(
                    "too many connections at once from users ({users_may_use} being served): try again when some have finished"
                ));
            }
            served.unprivileged += 1;
            *served.by_uid.entry(uid).or_insert(0) += 1;
        }
        served.all += 1;
        Ok(Ticket {
            admission: self.clone(),
            user: (!privileged).then_some(uid),
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut served = self.admission.served();
        served.all = served.all.saturating_sub(1);
        if let Some(uid) = self.user {
            served.unprivileged = served.unprivileged.saturating_sub(1);
            if let Some(own) = served.by_uid.get_mut(&uid) {
                *own = own.saturating_sub(1);
                if *own == 0 {
                    served.by_uid.remove(&uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_held_to_a_share_and_root_keeps_its_reserve() {
        let admission = Arc::new(Admission::default());
        let mut held = Vec::new();
        for _ in 0..MAX_PER_USER {
            held.push(admission.admit(1000, false).unwrap());
        }
        let refused = admission.admit(1000, false).unwrap_err();
        assert!(refused.contains("uid 1000"), "{refused}");
        // Other users fill what users may use together...
        let mut uid = 1001;
        while admission.admit(uid, false).map(|t| held.push(t)).is_ok() {
            if held.len() % MAX_PER_USER == 0 {
                uid += 1;
            }
        }
        assert_eq!(held.len(), MAX_CONNECTIONS - RESERVED_FOR_PRIVILEGED);
        assert!(admission.admit(5000, false).is_err());
        // ...and root still has its reserve, and the rest of the total, and no more.
        for _ in 0..RESERVED_FOR_PRIVILEGED {
            held.push(admission.admit(0, true).unwrap());
        }
        assert!(admission.admit(0, true).is_err());
        // Finished connections give their places back.
        held.clear();
        assert_eq!(admission.served().all, 0);
        assert!(admission.served().by_uid.is_empty());
        assert!(admission.admit(1000, false).is_ok());
    }
}
