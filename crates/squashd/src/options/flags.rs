//! The generic mount flags (`suid`/`nosuid`, `dev`/`nodev`, `exec`/`noexec`,
//! `atime`/`noatime`) as one typed set: parsed once, the last of a pair given wins, and each
//! path is given its own form of the result ([`MountFlags::ms_flags`] for the kernel path's
//! mount(2), [`MountFlags::fuse_names`] for the FUSE session).

use nix::mount::MsFlags;

/// One generic mount flag as an option names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MountFlag {
    Suid,
    NoSuid,
    Dev,
    NoDev,
    Exec,
    NoExec,
    Atime,
    NoAtime,
}

/// What the generic mount flags say, once every option is applied. The mount is always
/// read-only; by default it is `nosuid,nodev`, with programs allowed to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MountFlags {
    /// Set-user-ID and set-group-ID bits are ignored.
    pub(crate) nosuid: bool,
    /// Device files cannot be opened.
    pub(crate) nodev: bool,
    /// Programs cannot be run.
    pub(crate) noexec: bool,
    /// Access times are not updated (the image has none to update: accepted for fstab's sake).
    pub(crate) noatime: bool,
}

impl Default for MountFlags {
    fn default() -> Self {
        MountFlags {
            nosuid: true,
            nodev: true,
            noexec: false,
            noatime: false,
        }
    }
}

impl MountFlags {
    /// Applies `flag` (given after the ones applied before: the last of a pair wins).
    pub(crate) fn set(&mut self, flag: MountFlag) {
        match flag {
            MountFlag::Suid => self.nosuid = false,
            MountFlag::NoSuid => self.nosuid = true,
            MountFlag::Dev => self.nodev = false,
            MountFlag::NoDev => self.nodev = true,
            MountFlag::Exec => self.noexec = false,
            MountFlag::NoExec => self.noexec = true,
            MountFlag::Atime => self.noatime = false,
            MountFlag::NoAtime => self.noatime = true,
        }
    }

    /// What a mount the daemon makes for a user always is, whatever the user asked:
    /// `nosuid,nodev`, as fusermount3 makes it.
    pub(crate) fn restrict_for_user(&mut self) {
        self.nosuid = true;
        self.nodev = true;
    }

    /// The flags of mount(2) (the kernel path), besides `MS_RDONLY`, which the mount adds.
    pub(crate) fn ms_flags(&self) -> MsFlags {
        let mut flags = MsFlags::empty();
        flags.set(MsFlags::MS_NOSUID, self.nosuid);
        flags.set(MsFlags::MS_NODEV, self.nodev);
        flags.set(MsFlags::MS_NOEXEC, self.noexec);
        flags.set(MsFlags::MS_NOATIME, self.noatime);
        flags
    }

    /// The flags as the FUSE session takes them (`squashd_fuse::MountConfig::flags`): only
    /// those that differ from its defaults (read-only, `nosuid`, `nodev`), so that a mount
    /// through fusermount3 is given no more than it was asked for.
    pub(crate) fn fuse_names(&self) -> Vec<String> {
        [
            (!self.nosuid, "suid"),
            (!self.nodev, "dev"),
            (self.noexec, "noexec"),
            (self.noatime, "noatime"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name.to_string())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_nosuid_nodev_on_both_paths() {
        let flags = MountFlags::default();
        assert_eq!(flags.ms_flags(), MsFlags::MS_NOSUID | MsFlags::MS_NODEV);
        assert!(flags.fuse_names().is_empty());
    }

    #[test]
    fn the_last_of_a_pair_wins_on_both_paths() {
        let mut flags = MountFlags::default();
        for flag in [MountFlag::Suid, MountFlag::NoExec, MountFlag::NoAtime] {
            flags.set(flag);
        }
        assert_eq!(
            flags.ms_flags(),
            MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_NOATIME
        );
        assert_eq!(flags.fuse_names(), ["suid", "noexec", "noatime"]);
        for flag in [MountFlag::NoSuid, MountFlag::Dev, MountFlag::Exec] {
            flags.set(flag);
        }
        assert_eq!(flags.ms_flags(), MsFlags::MS_NOSUID | MsFlags::MS_NOATIME);
        assert_eq!(flags.fuse_names(), ["dev", "noatime"]);
    }

    #[test]
    fn a_users_mount_is_nosuid_nodev_whatever_was_asked() {
        let mut flags = MountFlags::default();
        flags.set(MountFlag::Suid);
        flags.set(MountFlag::Dev);
        flags.restrict_for_user();
        assert!(flags
            .ms_flags()
            .contains(MsFlags::MS_NOSUID | MsFlags::MS_NODEV));
        assert!(flags.fuse_names().is_empty());
    }
}
