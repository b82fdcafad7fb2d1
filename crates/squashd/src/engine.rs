//! Which path serves a mount: the kernel's EROFS on a translated metadata image, or FUSE.
//!
//! The rule, for `squashd mount`, `squashd attach` and serve configs alike:
//! - `-o fuse` serves through FUSE, `-o kernel` through the kernel (or fails, saying why);
//! - with neither, the kernel path is taken when it can give what was asked: squashd runs as
//!   root, the kernel mounts EROFS from files (Linux 6.12+ with EROFS), the mount is for every
//!   user (`allow_other`: a kernel mount cannot keep other users out, as a FUSE mount without
//!   `allow_other` does), and no option needs FUSE (`timeout=`: the kernel answers reads of
//!   cached data without squashd seeing them, so squashd cannot tell that a mount is idle).
//!   Otherwise FUSE; when only the kernel's or the options' lack kept a root caller's
//!   `allow_other` mount off the kernel path, squashd says why in one line.
//!
//! What happens when the kernel path, once chosen, fails (falls back to FUSE unless `kernel`
//! was given) is the mount funnel's: [`crate::funnel`].

use crate::cli::UsageError;
use crate::options::{Engine, Options};

/// Why the kernel path cannot serve a mount with these options here, if it cannot.
fn kernel_refusal(options: &Options, privileged: bool) -> Option<String> {
    if !privileged {
        return Some("the kernel path needs root (it mounts with mount(2))".into());
    }
    if options.gave("timeout") {
        return Some(
            "timeout= needs the FUSE path (the kernel serves cached reads without squashd, which \
             then cannot tell that the mount is idle)"
                .into(),
        );
    }
    kernel_support().err()
}

/// The running kernel's release and its (major, minor) version ((0, 0) if unreadable).
pub(crate) fn kernel_version() -> (String, (u32, u32)) {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (release, (major, minor))
}

/// Whether this kernel mounts EROFS from regular files. A yes is remembered: a daemon
/// attaching dozens of images at boot asks once, not once per image.
fn kernel_support() -> Result<(), String> {
    static SUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SUPPORTED.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let (release, version) = kernel_version();
    if version < (6, 12) {
        return Err(format!(
            "Linux {release} cannot mount EROFS from a file (6.12 or later can)"
        ));
    }
    let has_erofs = || {
        std::fs::read_to_string("/proc/filesystems").is_ok_and(|t| {
            t.lines()
                .any(|l| l.split_whitespace().last() == Some("erofs"))
        })
    };
    if !has_erofs() {
        // A module not loaded yet: mount(2) would load it, but the check comes first.
        let _ = std::process::Command::new("modprobe")
            .args(["-q", "erofs"])
            .status();
        if !has_erofs() {
            return Err("the kernel has no EROFS".into());
        }
    }
    SUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The path chosen for a mount, and, when the kernel path was possible in principle but not
/// taken, why. Called by the mount funnel ([`crate::funnel::mount_image`]) alone.
pub(crate) fn choose(
    options: &Options,
    privileged: bool,
) -> Result<(Engine, Option<String>), UsageError> {
    match options.engine {
        Engine::Fuse => Ok((Engine::Fuse, None)),
        Engine::Kernel => match kernel_refusal(options, privileged) {
            None => Ok((Engine::Kernel, None)),
            Some(why) => Err(UsageError(format!("mount option kernel: {why}"))),
        },
        Engine::Auto => {
            if !privileged {
                return Ok((Engine::Fuse, None));
            }
            if !options.allow_other {
                return Ok((Engine::Fuse, None));
            }
            match kernel_refusal(options, privileged) {
                None => Ok((Engine::Kernel, None)),
                Some(why) => Ok((
                    Engine::Fuse,
                    Some(format!("FUSE, not the kernel path: {why}")),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's mount is never the kernel path's: EROFS cannot keep other users out, and
    /// `allow_other` is the only case where the kernel path would otherwise be chosen.
    #[test]
    fn a_users_mount_is_always_served_by_fuse() {
        let parse = |o: &str| {
            Options::parse(
                &[o.to_string()],
                "x".as_ref(),
                crate::options::Context::LoneMount,
            )
            .unwrap()
        };
        for given in ["allow_other", "allow_other,ro", "allow_root"] {
            assert_eq!(
                choose(&parse(given), false).unwrap(),
                (Engine::Fuse, None),
                "{given}"
            );
        }
        let e = choose(&parse("allow_other,kernel"), false).unwrap_err();
        assert!(e.0.contains("needs root"), "{}", e.0);
    }
}
