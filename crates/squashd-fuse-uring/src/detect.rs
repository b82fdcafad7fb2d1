//! Whether this kernel offers FUSE over io_uring, and what to tell the admin when it does not.

use crate::abi::{FUSE_INIT_EXT, FUSE_OVER_IO_URING};

/// The module parameter that turns FUSE over io_uring on (Linux 6.14+).
pub const ENABLE_URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// What the admin does to turn it on.
pub const ENABLE_HINT: &str = "add fuse.enable_uring=1 to the kernel command line, or run \
     `echo 1 > /sys/module/fuse/parameters/enable_uring` as root (mounts made after that use it)";

/// What the kernel says about FUSE over io_uring before any mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSupport {
    /// `enable_uring` is on: INIT requests offer `FUSE_OVER_IO_URING`.
    Enabled,
    /// The kernel has it but `enable_uring` is off.
    Disabled,
    /// No `enable_uring` parameter: a kernel before 6.14, or built without CONFIG_FUSE_IO_URING
    /// (or the fuse module is not loaded yet).
    Missing,
}

impl KernelSupport {
    /// Reads [`ENABLE_URING_PARAMETER`].
    pub fn probe() -> KernelSupport {
        match std::fs::read_to_string(ENABLE_URING_PARAMETER) {
            Ok(value) if matches!(value.trim(), "Y" | "y" | "1") => KernelSupport::Enabled,
            Ok(_) => KernelSupport::Disabled,
            Err(_) => KernelSupport::Missing,
        }
    }

    /// The one-line explanation for `-o uring=on` when it cannot be had, or `None` if enabled.
    pub fn refusal(self) -> Option<String> {
        match self {
            KernelSupport::Enabled => None,
            KernelSupport::Disabled => Some(format!(
                "FUSE over io_uring is off in this kernel ({ENABLE_URING_PARAMETER} is N): {ENABLE_HINT}"
            )),
            KernelSupport::Missing => Some(format!(
                "this kernel has no FUSE over io_uring ({ENABLE_URING_PARAMETER} does not exist; \
                 it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING): mount with uring=off or auto"
            )),
        }
    }
}

/// Whether an INIT request (its `fuse_init_in.flags` and `flags2`) offers FUSE over io_uring:
/// the authoritative answer for one connection, since the parameter may change after a probe.
pub fn init_offers_uring(flags: u32, flags2: u32) -> bool {
    flags & FUSE_INIT_EXT != 0 && u64::from(flags2) << 32 & FUSE_OVER_IO_URING != 0
}

/// The `flags2` bit to set in the INIT reply (with `FUSE_INIT_EXT` in `flags`) to accept it.
pub const INIT_FLAGS2_OVER_IO_URING: u32 = (FUSE_OVER_IO_URING >> 32) as u32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_flags() {
        assert!(init_offers_uring(FUSE_INIT_EXT, INIT_FLAGS2_OVER_IO_URING));
        assert!(!init_offers_uring(0, INIT_FLAGS2_OVER_IO_URING));
        assert!(!init_offers_uring(FUSE_INIT_EXT, 0));
        assert_eq!(INIT_FLAGS2_OVER_IO_URING, 1 << 9);
    }

    #[test]
    fn refusal_says_how_to_enable() {
        let text = KernelSupport::Disabled
            .refusal()
            .expect("disabled is refused");
        assert!(text.contains("fuse.enable_uring=1"));
        assert!(text.contains("echo 1 > /sys/module/fuse/parameters/enable_uring"));
        assert_eq!(KernelSupport::Enabled.refusal(), None);
    }
}
