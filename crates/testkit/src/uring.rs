//! The two FUSE transports a mounting test runs on: /dev/fuse always, and FUSE over io_uring
//! where the kernel has it (Linux 6.14+, as root: the test turns the module parameter
//! `enable_uring` on for its run and restores it).
//!
//! The parameter is machine-wide, and the tests of one binary run in parallel threads, so every
//! test that touches it goes through this module's process-wide guards: any number of
//! [`RingOn`] at once (the first turns the parameter on, the last restores the value it found),
//! or one [`RingOff`] alone (for a test of the refusal when the kernel does not offer the ring).
//! A mount made meanwhile by another test asks for its own transport (`uring=on|off`), so the
//! parameter being on does not change what that test checks.
//!
//! ```no_run
//! for transport in testkit::uring::transports() {
//!     let opts = format!("fuse,uring={}", transport.uring_option());
//!     // ... mount with opts, check, unmount; the ring's guard lives as long as `transport` ...
//! }
//! ```

use std::path::Path;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The module parameter that lets the kernel offer FUSE over io_uring at INIT.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Held shared by [`RingOn`], exclusively by [`RingOff`].
static TURNS: RwLock<()> = RwLock::new(());
/// [`RingOn`] guards alive, and the value the parameter had before the first.
static ON: Mutex<(usize, Option<String>)> = Mutex::new((0, None));

fn read_parameter() -> Option<String> {
    std::fs::read_to_string(ENABLE_URING)
        .ok()
        .map(|v| v.trim().to_string())
}

fn write_parameter(value: &str) {
    if let Err(e) = std::fs::write(ENABLE_URING, value) {
        eprintln!("could not set {ENABLE_URING} to {value}: {e}");
    }
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`): the kernel's number of
/// ring queues, each of which gets its own entries.
pub fn possible_cpus() -> u64 {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .expect("read /sys/devices/system/cpu/possible");
    let last = list.trim().rsplit(['-', ',']).next().unwrap_or_default();
    last.parse::<u64>().expect("the last possible CPU's number") + 1
}

/// Why the ring cannot be tested here, if it cannot.
pub fn ring_unavailable() -> Option<String> {
    if !super::is_root() {
        return Some("FUSE over io_uring needs root to turn enable_uring on".to_string());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".to_string());
    }
    if !Path::new(ENABLE_URING).exists() {
        return Some(format!(
            "{ENABLE_URING} does not exist (a kernel before 6.14?)"
        ));
    }
    None
}

/// `enable_uring` on for as long as any of these lives in the process.
#[derive(Debug)]
pub struct RingOn {
    _turn: RwLockReadGuard<'static, ()>,
}

impl RingOn {
    /// Turns the parameter on (if no other guard did), or says why it cannot.
    pub fn take() -> Result<RingOn, String> {
        if let Some(reason) = ring_unavailable() {
            return Err(reason);
        }
        let turn = TURNS.read().unwrap_or_else(|e| e.into_inner());
        let mut on = ON.lock().unwrap_or_else(|e| e.into_inner());
        if on.0 == 0 {
            on.1 = read_parameter();
            write_parameter("1");
        }
        on.0 += 1;
        Ok(RingOn { _turn: turn })
    }
}

impl Drop for RingOn {
    fn drop(&mut self) {
        let mut on = ON.lock().unwrap_or_else(|e| e.into_inner());
        on.0 -= 1;
        if on.0 == 0 {
            if let Some(old) = on.1.take() {
                write_parameter(&old);
            }
        }
    }
}

/// `enable_uring` off, and no [`RingOn`] in the process, for this guard's life; the old value
/// is restored when it drops.
#[derive(Debug)]
pub struct RingOff {
    old: Option<String>,
    _turn: RwLockWriteGuard<'static, ()>,
}

impl RingOff {
    /// Turns the parameter off once no [`RingOn`] is left, or says why it cannot.
    pub fn take() -> Result<RingOff, String> {
        if let Some(reason) = ring_unavailable() {
            return Err(reason);
        }
        let turn = TURNS.write().unwrap_or_else(|e| e.into_inner());
        let old = read_parameter();
        write_parameter("0");
        Ok(RingOff { old, _turn: turn })
    }
}

impl Drop for RingOff {
    fn drop(&mut self) {
        if let Some(old) = self.old.take() {
            write_parameter(&old);
        }
    }
}

/// A FUSE transport to run a test on.
#[derive(Debug)]
pub enum Transport {
    /// /dev/fuse (`uring=off`).
    DevFuse,
    /// FUSE over io_uring (`uring=on`), with the parameter on while this lives.
    Ring(RingOn),
}

impl Transport {
    /// The mount option's value that asks for this transport.
    pub fn uring_option(&self) -> &'static str {
        match self {
            Transport::DevFuse => "off",
            Transport::Ring(_) => "on",
        }
    }

    /// The name `squashd status` shows for it.
    pub fn status_name(&self) -> &'static str {
        match self {
            Transport::DevFuse => "dev-fuse",
            Transport::Ring(_) => "io-uring",
        }
    }

    /// Whether this is the ring.
    pub fn is_ring(&self) -> bool {
        matches!(self, Transport::Ring(_))
    }
}

/// /dev/fuse, then the ring where this machine allows it (else `SKIPPED: <reason>` is printed
/// for the ring's half of the test).
pub fn transports() -> Vec<Transport> {
    let mut all = vec![Transport::DevFuse];
    match RingOn::take() {
        Ok(on) => all.push(Transport::Ring(on)),
        Err(reason) => super::skip(&format!("(the io_uring half of the test) {reason}")),
    }
    all
}
