//! Opening a cache directory: its lock, leftovers of a crash, and the entries already there.

use std::fs::{self, File, Permissions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{flock, FlockOperation};

use super::entry::{EntryId, HEADER_LEN, MAX_ENTRY_LEN};
use super::index::Index;
use super::DiskCacheError;

/// The lock file, in the cache directory.
const LOCK_FILE: &str = "lock";
/// The directory of entry files, in the cache directory.
pub(super) const UNITS_DIR: &str = "units";
/// The mode of the cache's directories: the daemon's user's alone.
const DIR_MODE: u32 = 0o700;
/// The mode of its files.
pub(super) const FILE_MODE: u32 = 0o600;
/// How temporary files' names start, in the directory of entry files.
pub(super) const TEMP_PREFIX: &str = "tmp.";

/// A cache directory opened for this process alone.
pub(super) struct Opened {
    /// Held open for the flock on it, which the kernel releases when it is closed (also when the
    /// process dies, so a crash leaves no stale lock).
    pub lock: File,
    /// The directory of entry files.
    pub units: PathBuf,
    /// The entries found, within the budget.
    pub index: Index,
}

/// Creates `dir` if need be, locks it, removes leftover temporary files and entries too damaged
/// to be one, indexes the rest by mtime and evicts the oldest beyond `budget`.
pub(super) fn open(dir: &Path, budget: u64) -> Result<Opened, DiskCacheError> {
    let err = |what: &'static str| {
        let dir = dir.to_path_buf();
        move |error| DiskCacheError::Io { dir, what, error }
    };
    if let Some(parent) = dir.parent() {
        // The parents get the usual modes: only the cache's own directory need be private.
        fs::create_dir_all(parent).map_err(err("cannot create its parent directory"))?;
    }
    private_dir(dir, dir)?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(FILE_MODE)
        .open(dir.join(LOCK_FILE))
        .map_err(err("cannot open its lock file"))?;
    make_private(&lock, FILE_MODE).map_err(err("cannot make its lock file 0600"))?;
    match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            return Err(DiskCacheError::InUse {
                dir: dir.to_path_buf(),
            })
        }
        Err(errno) => return Err(err("cannot lock its lock file")(errno.into())),
    }
    let units = dir.join(UNITS_DIR);
    private_dir(dir, &units)?;

    let mut found = Vec::new();
    for item in fs::read_dir(&units).map_err(err("cannot list its units directory"))? {
        let item = item.map_err(err("cannot list its units directory"))?;
        let name = item.file_name();
        let path = item.path();
        let Some(id) = name.to_str().and_then(EntryId::parse) else {
            if name.to_string_lossy().starts_with(TEMP_PREFIX) {
                // The lock says no other process writes here: this is a crash's leftover.
                remove(&path, "a temporary file left by a crash");
            } else {
                tracing::warn!(
                    "disk cache: {} is not a cache entry; left alone",
                    path.display()
                );
            }
            continue;
        };
        let md = match fs::symlink_metadata(&path) {
            Ok(md) => md,
            Err(error) => {
                tracing::warn!(
                    "disk cache: cannot stat {}: {error}; left alone",
                    path.display()
                );
                continue;
            }
        };
        if !md.is_file() || !(HEADER_LEN..=MAX_ENTRY_LEN).contains(&md.len()) {
            // Checked here, not only at a read: a file the index counts must be one a read can check.
            remove(&path, "not an entry (not a file, or a length no entry has)");
            continue;
        }
        if md.mode() & 0o7777 != FILE_MODE {
            // Written by an older version, under the umask of its day.
            if let Err(error) = fs::set_permissions(&path, Permissions::from_mode(FILE_MODE)) {
                tracing::warn!("disk cache: cannot make {} 0600: {error}", path.display());
                remove(&path, "an entry that could not be made private");
                continue;
            }
        }
        found.push((
            md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            id,
            md.len(),
        ));
    }
    // Oldest first: the order of mtimes, which hits move forward, is the recency order.
    found.sort_by_key(|&(mtime, _, _)| mtime);
    let mut index = Index::default();
    for (mtime, id, len) in found {
        index.insert_found(id, len, mtime);
    }
    if index.charged() > budget {
        // The budget was lowered since the entries were written.
        for (id, _) in index.evict(index.charged() - budget) {
            index.unlinked(id, unlink(&units.join(id.name())));
        }
    }
    Ok(Opened { lock, units, index })
}

/// Creates the directory `path` (in the cache directory `dir`) 0700 if it is not there, and
/// makes sure it is private: owned by this process's user and 0700, whatever the umask was
/// when it was made (an older version made it 0777 less the umask).
///
/// One owned by another user is refused rather than taken over: its owner can put files in it
/// and rename those there, so entries could be forged or swapped under the daemon (their CRC is
/// no defence: anyone can compute one); and root taking a user's directory for a cache would
/// lock that user out of it. The error says how to fix it.
fn private_dir(dir: &Path, path: &Path) -> Result<(), DiskCacheError> {
    let err = |what: &'static str| {
        let dir = dir.to_path_buf();
        move |error| DiskCacheError::Io { dir, what, error }
    };
    match fs::DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(err("cannot create the directory")(error)),
    }
    // Checked and changed through one descriptor, so that both apply to the same directory.
    let opened = File::open(path).map_err(err("cannot open the directory"))?;
    let md = opened
        .metadata()
        .map_err(err("cannot stat the directory"))?;
    if !md.is_dir() {
        return Err(err("not a directory")(
            std::io::ErrorKind::NotADirectory.into(),
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if md.uid() != me {
        return Err(DiskCacheError::NotOwned {
            dir: dir.to_path_buf(),
            path: path.to_path_buf(),
            owner: md.uid(),
            me,
        });
    }
    if md.mode() & 0o7777 != DIR_MODE {
        tracing::info!(
            "disk cache: {} was mode {:04o}; made 0700 (private to the daemon's user)",
            path.display(),
            md.mode() & 0o7777
        );
    }
    make_private(&opened, DIR_MODE).map_err(err("cannot make the directory 0700"))
}

/// Sets `file`'s mode to `mode` if it is not that already.
pub(super) fn make_private(file: &File, mode: u32) -> std::io::Result<()> {
    if file.metadata()?.mode() & 0o7777 != mode {
        file.set_permissions(Permissions::from_mode(mode))?;
    }
    Ok(())
}

fn remove(path: &Path, why: &str) {
    match fs::remove_file(path) {
        Ok(()) => tracing::info!("disk cache: removed {}: {why}", path.display()),
        Err(error) => tracing::warn!(
            "disk cache: cannot remove {} ({why}): {error}",
            path.display()
        ),
    }
}

/// Removes an entry file; returns whether its bytes left the disk (also true if it was gone).
pub(super) fn unlink(path: &Path) -> bool {
    match fs::remove_file(path) {
        Ok(()) => true,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => true,
        Err(error) => {
            tracing::warn!(
                "disk cache: cannot remove {}: {error}; its bytes stay counted",
                path.display()
            );
            false
        }
    }
}
