//! Writes that survive a power loss, not only a crash of the process.
//!
//! A rename is atomic for other processes, but the kernel may put the rename on the disk before
//! the data it points at: after a power loss the new name then holds an empty or truncated file
//! (the ext4 "zero-length file" problem, and the reason for `fsync` on the directory in POSIX
//! `rename(2)`/`fsync(2)`: a directory entry is durable only once its folder is flushed). So every
//! atomic write of the crate goes through [`replace_via`] (or [`publish`] for a folder already
//! filled): fill a temp name, flush it (`fsync`), rename it into place, flush the folder that
//! holds it. Folders made for outputs are flushed into their parents the same way.
use std::fs::File;
use std::io;
use std::path::Path;

use crate::host::error::{DistillError, Result};

/// Flushes the data and metadata of file `path` to the disk.
///
/// # Errors
/// The `io::Error` of opening or flushing it.
pub fn sync_file(path: &Path) -> io::Result<()> {
    record(path);
    File::open(path)?.sync_all()
}

/// Flushes folder `path`, so that the entries created, renamed or removed in it are on the disk.
/// A no-op where folders cannot be opened (Windows, where `rename` is durable by itself).
///
/// # Errors
/// The `io::Error` of opening or flushing it.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    record(path);
    if cfg!(unix) {
        File::open(path)?.sync_all()?;
    }
    Ok(())
}

/// Flushes every file and folder under `root` (and `root` itself), deepest first.
///
/// # Errors
/// The first `io::Error` met.
pub fn sync_tree(root: &Path) -> io::Result<()> {
    sync_contents(root)?;
    sync_dir(root)
}

/// Flushes every file and folder under `root`, deepest first, but not `root` itself (which
/// [`publish`] flushes when it moves it).
///
/// # Errors
/// The first `io::Error` met.
pub fn sync_contents(root: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            sync_file(&path)?;
        }
    }
    Ok(())
}

/// Moves the finished `tmp` (a file, or a folder whose files are already flushed) to `path`:
/// flushes `tmp`, renames it, and flushes the folder that holds `path`.
///
/// # Errors
/// The `io::Error` of the first step that fails.
pub fn publish(tmp: &Path, path: &Path) -> io::Result<()> {
    if tmp.is_dir() {
        sync_dir(tmp)?;
    } else {
        sync_file(tmp)?;
    }
    std::fs::rename(tmp, path)?;
    sync_dir(parent(path))
}

/// `create_dir_all` whose new folders are flushed into their parents.
///
/// # Errors
/// The `io::Error` of creating or flushing a folder.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = path.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).collect();
    std::fs::create_dir_all(path)?;
    for dir in missing.iter().rev() {
        sync_dir(parent(dir))?;
    }
    Ok(())
}

/// The one atomic write of this crate: `fill` writes the temp path `tmp` (a file, or a folder
/// whose files it flushed), then [`publish`] moves it to `path`; readers (and a reboot after a
/// power loss) see the old `path` or the new one, never a part. On failure `tmp` is removed.
///
/// # Errors
/// The error of `fill`, or [`DistillError::Io`] naming `path` when the move fails.
pub fn replace_via(path: &Path, tmp: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let result = fill(tmp).and_then(|()| publish(tmp, path).map_err(|e| DistillError::io(path, e)));
    if result.is_err() {
        let _ = if tmp.is_dir() { std::fs::remove_dir_all(tmp) } else { std::fs::remove_file(tmp) };
    }
    result
}

/// Writes file `path` through `<path>.tmp` ([`replace_via`]).
///
/// # Errors
/// [`DistillError::Io`] naming `path`; the temp file is removed.
pub fn write_atomic(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
    let mut tmp_name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    tmp_name.push(".tmp");
    replace_via(path, &path.with_file_name(tmp_name), |tmp| {
        File::create(tmp).and_then(|mut f| fill(&mut f)).map_err(|e| DistillError::io(path, e))
    })
}

/// Writes file `path` through `dir/name.tmp.ext` ([`replace_via`]), for writers that pick the
/// file format from the extension (libtorch, tch), so it must stay last.
///
/// # Errors
/// The error of `fill`, or [`DistillError::Io`] naming `path`.
pub fn write_atomic_keeping_extension(path: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    replace_via(path, &path.with_file_name(format!("{stem}.tmp.{ext}")), fill)
}

/// The folder holding `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
thread_local! {
    static SYNCED: std::cell::RefCell<Vec<std::path::PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Tests read back, per thread, which paths were flushed and in which order.
fn record(_path: &Path) {
    #[cfg(test)]
    SYNCED.with(|s| s.borrow_mut().push(_path.to_path_buf()));
}

/// The paths this thread flushed since the last call (tests only).
#[cfg(test)]
pub(crate) fn take_synced() -> Vec<std::path::PathBuf> {
    SYNCED.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_flush_the_file_then_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        take_synced();
        create_dir_all(&nested).unwrap();
        // each new folder is flushed into its parent, outermost first
        assert_eq!(take_synced(), [dir.path().to_path_buf(), dir.path().join("a")]);
        let file = nested.join("report.json");
        write_atomic(&file, |f| io::Write::write_all(f, b"{}")).unwrap();
        assert_eq!(take_synced(), [nested.join("report.json.tmp"), nested.clone()]);
        assert_eq!(std::fs::read(&file).unwrap(), b"{}");
        assert!(!nested.join("report.json.tmp").exists());
        // a failing fill leaves the old file and no temp file
        let e = write_atomic(&file, |_| Err(io::Error::other("disk full"))).unwrap_err().to_string();
        assert!(e.contains("report.json") && e.contains("disk full"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"{}");
        assert!(!nested.join("report.json.tmp").exists());
    }
}
