//! Whether a cache path is this user's own (issue 28, F5 and F10): the registry cache and the compiled-module
//! cache hold bytes the host runs or trusts, so a path another user could write is never read from nor
//! written to. "Own" is what OpenSSH's StrictModes asks of `~/.ssh`: owned by the effective user (or root),
//! writable by no one else, and every directory above it likewise, except a sticky one (`/tmp`), in which
//! another user cannot rename or replace what is ours.
//!
//! This keeps other users out. It does not keep out the agent, which runs as this user: in personal mode
//! it can write the cache as it can the binary (docs/security.md says so); in separated mode the caches
//! belong to the service user.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why `meta` (of `path`) is not this user's own, or None when it is. `sticky_ok`: a sticky directory
/// writable by others is acceptable (for the ancestors of a cache, never the cache itself).
fn not_own(path: &Path, meta: &std::fs::Metadata, sticky_ok: bool) -> Option<String> {
    let me = euid();
    if meta.uid() != me && meta.uid() != 0 {
        return Some(format!("`{}` belongs to uid {}, not to this user (uid {me})", path.display(), meta.uid()));
    }
    let sticky = meta.is_dir() && meta.mode() & 0o1000 != 0;
    if meta.mode() & 0o022 != 0 && !(sticky_ok && sticky) {
        return Some(format!("`{}` is writable by other users (mode {:o})", path.display(), meta.mode() & 0o7777));
    }
    None
}

/// Checks that the directory `dir` and every directory above it are this user's own; Err says which is not.
/// A missing `dir` is fine when its nearest existing ancestor is (the cache will be created there).
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let abs = if dir.is_absolute() { dir.to_path_buf() } else { std::env::current_dir().map_err(|e| e.to_string())?.join(dir) };
    for p in abs.ancestors() {
        match std::fs::symlink_metadata(p) {
            Ok(m) => {
                // A symbolic link in the path is followed by every later open: judge what it points at, and the
                // link itself is only as safe as the directory it is in (checked as the next ancestor).
                let m = if m.file_type().is_symlink() { std::fs::metadata(p).map_err(|e| format!("`{}`: {e}", p.display()))? } else { m };
                if let Some(why) = not_own(p, &m, p != abs) {
                    return Err(why);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("`{}`: {e}", p.display())),
        }
    }
    Ok(())
}

/// Checks an open file of a cache: this user's own and writable by no one else.
pub fn check_file(path: &Path, file: &std::fs::File) -> Result<(), String> {
    let m = file.metadata().map_err(|e| format!("`{}`: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    not_own(path, &m, false).map_or(Ok(()), Err)
}

/// Reads a cache file of at most `max` bytes, only when it is this user's own (see [`check_file`]); a
/// symbolic link is not followed.
pub fn read_own(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    check_file(path, &f).map_err(|m| std::io::Error::new(std::io::ErrorKind::PermissionDenied, m))?;
    crate::files::read_file_bounded(f, &path.display().to_string(), max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_writable_by_others_is_not_own_but_a_sticky_ancestor_is_fine() {
        let d = tempfile::tempdir().unwrap();
        let c = d.path().join("cache");
        std::fs::create_dir(&c).unwrap();
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check_dir(&c), Ok(()));
        assert_eq!(check_dir(&c.join("not-yet")), Ok(()));
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check_dir(&c).unwrap_err().contains("writable by other users"));
        // Sticky is acceptable above a cache, never for the cache itself.
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_dir(&c).is_err());
        assert_eq!(check_dir(&c.join("inner")), Ok(()));
        let f = c.join("file");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read_own(&f, 10).unwrap_err().to_string().contains("writable by other users"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_own(&f, 10).unwrap(), b"x");
    }
}
