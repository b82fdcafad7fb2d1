//! Who may attach what, and where: the daemon's trust boundary.
//!
//! The daemon runs as root, so whatever it mounts for a user it mounts with root's power. A
//! user named in `allow_uids` therefore gets only what an unprivileged user gets from
//! `fusermount3`, and less where the config narrows it:
//! - the image is a file the user opened for reading with their own rights and passed over the
//!   socket (SCM_RIGHTS); the daemon never opens an image path on a user's behalf;
//! - the mount point is found with the user's own rights (in a child process that has become
//!   the user: see as_user.rs), so an error tells nothing of paths the user cannot search;
//!   it must be a directory the user owns, on a file system where user mounts make sense
//!   (fusermount3's list: no /proc, /sys, cgroup or other pseudo file system), on a writable
//!   mount, and not itself the root of a mount (mount_point.rs); it is checked on an open
//!   descriptor and mounted through that descriptor, so no rename or symlink swapped in after
//!   the check can move the mount elsewhere;
//! - the mount belongs to the user as one fusermount3 made would (`user_id`/`group_id` are
//!   theirs): the kernel lets that user in and keeps everyone else out, root included, unless
//!   `allow_other` (or `allow_root`) is given; a user's mount is always served by FUSE, never by
//!   the kernel path, which cannot keep anyone out;
//! - the mount is always `nosuid,nodev`; options that spend the daemon's resources or reach
//!   other users (`suid`, `dev`, cache budgets, threads, `control=`) are refused, and
//!   `allow_other` only where /etc/fuse.conf has `user_allow_other`, as for fusermount3;
//! - a user detaches only what they attached, holds at most `max_images_per_user` mounts, and
//!   sees in `status` only the images they attached.
//!
//! Root and the daemon's own user may do anything.

use crate::control::Caller;
use crate::options::Options;
use anyhow::{bail, Context};
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, SFlag};
use squashd_fuse::MountOwner;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// How many images one user may hold attached unless the config says otherwise.
pub(crate) const DEFAULT_MAX_IMAGES_PER_USER: usize = 16;

/// The limits the config sets on users who are not root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccessLimits {
    /// Images must lie under one of these directories (any, when empty).
    pub(crate) image_prefixes: Vec<PathBuf>,
    /// Mount points must lie under one of these directories (any, when empty).
    pub(crate) mount_prefixes: Vec<PathBuf>,
    /// Most images one user may hold attached at once.
    pub(crate) max_images_per_user: usize,
}

impl Default for AccessLimits {
    fn default() -> Self {
        AccessLimits {
            image_prefixes: Vec::new(),
            mount_prefixes: Vec::new(),
            max_images_per_user: DEFAULT_MAX_IMAGES_PER_USER,
        }
    }
}

/// What an attach that passed the checks mounts.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The image, open for reading; None for a remote image (root only), opened by address.
    pub(crate) image: Option<File>,
    /// Its path, for reports and the health check.
    pub(crate) image_path: PathBuf,
    /// The mount point's canonical path.
    pub(crate) mountpoint: PathBuf,
    /// The mount point, open (O_PATH): mounting through it mounts on the directory checked.
    pub(crate) mount_dir: OwnedFd,
    /// The options as given, plus `nosuid,nodev` for a user (for reports).
    pub(crate) options: Vec<String>,
    /// The user it is attached for (None: root or the daemon itself).
    pub(crate) owner: Option<u32>,
    /// The files the verity options name, opened with the user's rights (the options then
    /// name them as `/proc/self/fd/N`): held until the image is opened.
    pub(crate) verity_files: Vec<OwnedFd>,
}

/// The error of opening `path`, the `noun` of an attach: "not found", "is not a directory", or
/// "cannot open", with the system's reason after it.
fn open_error(e: std::io::Error, path: &Path, noun: &str) -> anyhow::Error {
    let what = match e.kind() {
        std::io::ErrorKind::NotFound => format!("{noun} not found"),
        std::io::ErrorKind::NotADirectory => format!("{noun} is not a directory"),
        _ => format!("cannot open the {noun}"),
    };
    anyhow::Error::new(e).context(format!("{}: {what}", path.display()))
}

impl AccessLimits {
    /// Checks an attach of `image` on `mountpoint` with `options` (as given, and `parsed`) by
    /// `caller`, who holds `held` images now. Opens what will be mounted; for a user, adds
    /// `nosuid,nodev` to `parsed`.
    pub(crate) fn check_attach(
        &self,
        caller: Caller,
        image: &Path,
        mountpoint: &Path,
        options: &[String],
        parsed: &mut Options,
        held: usize,
    ) -> anyhow::Result<Grant> {
        let privileged = caller.is_privileged();
        let uid = caller.uid;
        let (image_file, image_path) = match caller.image {
            _ if crate::remote::is_remote(image) => {
                if !privileged {
                    bail!(
                        "permission denied: uid {uid} may not attach a remote image (the daemon \
                         would fetch it with its own network access and credentials); root may, \
                         or it can be listed in the daemon's config"
                    );
                }
                (None, image.to_path_buf())
            }
            Some(file) => {
                check_readable(&file, image)?;
                // The path the descriptor was opened at, as the kernel knows it: the request's
                // path is the client's word only.
                let path = std::fs::read_link(format!("/proc/self/fd/{}", {
                    use std::os::fd::AsRawFd;
                    file.as_raw_fd()
                }))
                .unwrap_or_else(|_| image.to_path_buf());
                (Some(file), path)
            }
            None if privileged => {
                let (file, path) = crate::real_path::open_resolved(image, OFlag::O_RDONLY)
                    .map_err(|e| open_error(e, image, "image"))?;
                (Some(File::from(file)), path)
            }
            None => bail!(
                "permission denied: uid {uid} must pass the image as an open file (`squashd attach` does)"
            ),
        };
        let user = MountOwner {
            uid,
            gid: caller.gid,
        };
        let (mount_dir, mountpoint) = if privileged {
            crate::real_path::open_resolved(mountpoint, OFlag::O_PATH | OFlag::O_DIRECTORY)
        } else {
            super::mount_point::open_for_user(user, mountpoint)
        }
        .map_err(|e| open_error(e, mountpoint, "mount point"))?;
        let mut options = options.to_vec();
        let mut verity_files = Vec::new();
        let owner = if privileged {
            None
        } else {
            super::mount_point::check_for_user(&mount_dir, &mountpoint, uid)?;
            let dir = fstat(mount_dir.as_fd())
                .map_err(std::io::Error::from)
                .with_context(|| format!("{}: cannot stat", mountpoint.display()))?;
            if dir.st_uid != uid {
                bail!(
                    "permission denied: {} belongs to uid {}, and uid {uid} may attach only onto a directory of its own",
                    mountpoint.display(),
                    dir.st_uid
                );
            }
            under_prefix(
                &image_path,
                &self.image_prefixes,
                "image",
                "allow_image_prefixes",
            )?;
            under_prefix(
                &mountpoint,
                &self.mount_prefixes,
                "mount point",
                "allow_mount_prefixes",
            )?;
            check_user_options(parsed, uid)?;
            verity_files = open_verity_files(user, parsed, &image_path, image_file.as_ref())?;
            if held >= self.max_images_per_user {
                bail!(
                    "permission denied: uid {uid} already has {held} images attached (max_images_per_user = {})",
                    self.max_images_per_user
                );
            }
            options.push("nosuid,nodev".to_string());
            parsed.flags.restrict_for_user();
            parsed.owner = Some(user);
            Some(uid)
        };
        Ok(Grant {
            image: image_file,
            image_path,
            mountpoint,
            mount_dir,
            options,
            owner,
            verity_files,
        })
    }
}

/// A user's verity files: each path the options name is opened with the user's rights and
/// named in `parsed` as the descriptor opened (the daemon never opens a path a user gave with
/// its own rights); refused if the user could not open it, or it is not a regular file. The
/// files verity would find beside the image are opened with the user's rights too (refused if
/// the user could not read one that is there), once: discovery then reads those descriptors
/// and the image's xattrs through the image's (`parsed.verity.opened_beside`), so a file
/// swapped in beside the image after this check is never read.
fn open_verity_files(
    user: MountOwner,
    parsed: &mut Options,
    image_path: &Path,
    image: Option<&File>,
) -> anyhow::Result<Vec<OwnedFd>> {
    use squashd_core::verity::{sidecar_names, OpenedBeside, VerityMode, SIDECAR_SUFFIXES};
    use std::os::fd::AsRawFd;
    let uid = user.uid;
    let mut opened = Vec::new();
    let through = |fd: &OwnedFd| PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let mut beside = OpenedBeside::default();
    for path in [
        &mut parsed.verity.verity_data,
        &mut parsed.verity.root_hash_sig,
    ]
    .into_iter()
    .flatten()
    {
        let fd = super::as_user::open_file(user, path).map_err(|e| {
            anyhow::anyhow!(
                "permission denied: uid {uid} cannot read {}: {e}",
                path.display()
            )
        })?;
        if !is_regular(&fd) {
            bail!("{}: not a regular file", path.display());
        }
        // Messages name the file as the user gave it (`VerityOptions::shown`).
        beside.given.push((path.clone(), through(&fd)));
        *path = through(&fd);
        opened.push(fd);
    }
    if parsed.verity.mode == VerityMode::Off {
        return Ok(opened);
    }
    if let Some(image) = image {
        let fd = OwnedFd::from(
            image
                .try_clone()
                .with_context(|| format!("{}: cannot hold the image", image_path.display()))?,
        );
        beside.image = Some(through(&fd));
        opened.push(fd);
    }
    for suffix in SIDECAR_SUFFIXES {
        for sidecar in sidecar_names(image_path, suffix) {
            match super::as_user::open_file(user, &sidecar) {
                // As discovery by name: what is not a regular file is not there.
                Ok(fd) if is_regular(&fd) => {
                    beside.files.push((sidecar, through(&fd)));
                    opened.push(fd);
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => bail!(
                    "permission denied: uid {uid} cannot read {}: {e} (verity would use it; \
                     give verity=off to mount the image unverified)",
                    sidecar.display()
                ),
            }
        }
    }
    parsed.verity.opened_beside = Some(beside);
    Ok(opened)
}

fn is_regular(fd: &OwnedFd) -> bool {
    fstat(fd.as_fd()).is_ok_and(|st| {
        SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
    })
}

/// The passed descriptor must be a regular file open for reading.
fn check_readable(file: &File, named: &Path) -> anyhow::Result<()> {
    let flags = nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_GETFL)
        .map_err(std::io::Error::from)
        .context("cannot inspect the image descriptor")?;
    let flags = OFlag::from_bits_retain(flags);
    if flags.contains(OFlag::O_PATH) || (flags & OFlag::O_ACCMODE) == OFlag::O_WRONLY {
        bail!(
            "{}: the image descriptor passed is not open for reading",
            named.display()
        );
    }
    let stat = fstat(file.as_fd())
        .map_err(std::io::Error::from)
        .context("cannot inspect the image descriptor")?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        bail!(
            "{}: the image passed is not a regular file",
            named.display()
        );
    }
    Ok(())
}

fn under_prefix(
    path: &Path,
    prefixes: &[PathBuf],
    what: &str,
    setting: &str,
) -> anyhow::Result<()> {
    if prefixes.is_empty() || prefixes.iter().any(|p| path.starts_with(p)) {
        return Ok(());
    }
    bail!(
        "permission denied: the {what} {} is outside the directories the daemon allows ({setting})",
        path.display()
    )
}

/// Refuses the options a user may not give, naming the first and why.
fn check_user_options(options: &Options, uid: u32) -> anyhow::Result<()> {
    if let Some((key, why)) = options.gave_root_only() {
        bail!("permission denied: uid {uid} may not use the option {key:?}: {why}");
    }
    // fusermount3 lets users give allow_root under the same condition as allow_other.
    for key in ["allow_other", "allow_root"] {
        if options.gave(key) && !user_allow_other() {
            bail!(
                "permission denied: uid {uid} may not use {key}: /etc/fuse.conf does not set user_allow_other"
            );
        }
    }
    Ok(())
}

/// Whether /etc/fuse.conf lets users mount with `allow_other`, as fusermount3 reads it.
fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|text| {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .any(|l| l == "user_allow_other")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Context;

    #[test]
    fn user_options() {
        let parse =
            |o: &str| Options::parse(&[o.to_string()], Path::new("x"), Context::Daemon).unwrap();
        assert!(check_user_options(&parse("uid=1,noexec,subdir=a,nosuid"), 5).is_ok());
        for bad in ["suid", "dev", "data_cache=1G", "threads=64", "control=/x"] {
            let e = check_user_options(&parse(&format!("ro,{bad}")), 5).unwrap_err();
            assert!(e.to_string().contains("may not use"), "{bad}: {e}");
        }
    }

    #[test]
    fn prefixes() {
        let p = [PathBuf::from("/srv/images")];
        assert!(under_prefix(Path::new("/srv/images/a.sqfs"), &p, "image", "x").is_ok());
        assert!(under_prefix(Path::new("/srv/images2/a.sqfs"), &p, "image", "x").is_err());
        assert!(under_prefix(Path::new("/anything"), &[], "image", "x").is_ok());
    }

    /// The checks in-process, on real files and a real unprivileged uid (the mount point is
    /// looked up as that user by a child process): a user's grant is theirs, `nosuid,nodev`
    /// in the typed flags and in what status shows, and a directory of someone else's is
    /// refused.
    #[test]
    fn a_users_grant_is_theirs_and_nosuid_nodev() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: the checks switch to another uid, which needs root");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        const UID: u32 = 4242;
        let scratch = tempfile::Builder::new()
            .prefix("squashd-access-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let image = scratch.path().join("a.sqfs");
        std::fs::write(&image, b"only its type and mode are checked here").unwrap();
        let (own, roots) = (scratch.path().join("own"), scratch.path().join("roots"));
        for dir in [&own, &roots] {
            std::fs::create_dir(dir).unwrap();
        }
        nix::unistd::chown(&own, Some(UID.into()), Some(UID.into())).unwrap();
        let caller = || Caller {
            uid: UID,
            gid: UID,
            image: Some(File::open(&image).unwrap()),
        };
        let given = ["noatime".to_string()];
        let mut parsed = Options::parse(&given, &image, Context::Daemon).unwrap();
        let limits = AccessLimits::default();
        let grant = limits
            .check_attach(caller(), &image, &own, &given, &mut parsed, 0)
            .unwrap();
        assert_eq!(grant.owner, Some(UID));
        assert_eq!(grant.mountpoint, own.canonicalize().unwrap());
        assert_eq!(grant.options, ["noatime", "nosuid,nodev"]);
        assert_eq!(parsed.owner, Some(MountOwner { uid: UID, gid: UID }));
        assert!(parsed.flags.nosuid && parsed.flags.nodev && parsed.flags.noatime);

        let mut parsed = Options::parse(&given, &image, Context::Daemon).unwrap();
        let refused = limits
            .check_attach(caller(), &image, &roots, &given, &mut parsed, 0)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("belongs to uid 0"), "{refused}");
        let full = limits
            .check_attach(caller(), &image, &own, &given, &mut parsed, 16)
            .unwrap_err()
            .to_string();
        assert!(full.contains("already has 16 images"), "{full}");
    }
}
