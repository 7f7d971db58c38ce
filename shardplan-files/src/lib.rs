//! shardplan-files: how the binaries (`shardplan`, `shardplan-collect`, `shardplan-train`) touch files.
//! planner-core does no I/O, so the file handling the three binaries share lives here, once.
//!
//! - [`write_atomic`]: a whole output file through a temporary file in the same directory, synced, then
//!   renamed over the target. Readers see the old file or the new one, never half of one; a failure
//!   removes the temporary file and leaves an earlier file untouched.
//! - [`read_capped`] / [`read_text_capped`]: read at most a limit of bytes, refusing a larger (or
//!   endless, like `/dev/zero`) input with an error naming the limit instead of exhausting memory.
//! - [`open_append_locked`] / [`lock_exclusive`]: an exclusive advisory lock (`File::try_lock`) held on
//!   an output for a whole run, so that a second run on the same output fails at once instead of
//!   appending beside the first.
//! - [`cpu_model`]: the CPU model `/proc/cpuinfo` names, which the collector records in a CPU dataset's
//!   fingerprint and `shardplan --cost-model cpu` matches against the embedded CPU profiles.
//!
//! Why std only: each of these is a few lines over `std::fs`, and std's file locks are stable since
//! Rust 1.89. One typed [`Error`] names the path and what was being done; the binaries wrap it in
//! their `anyhow` chains.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What went wrong with a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system error while `action` (e.g. "writing", "renaming ... to") on `path`.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: String,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An output path that names no file (`..`, `/`, an empty path).
    #[error("output path {} has no file name", path.display())]
    NoFileName {
        /// The path given.
        path: PathBuf,
    },
    /// An input larger than the most that is read.
    #[error("{} is larger than {limit_bytes} bytes, the most read", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit_bytes: u64,
    },
    /// Text that is not UTF-8.
    #[error("{} is not UTF-8 text: {source}", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Where decoding failed.
        source: std::string::FromUtf8Error,
    },
    /// Another process holds the exclusive lock of an output.
    #[error(
        "{} is locked: another run holds it and is writing it; wait for that run to finish, or choose another output",
        path.display()
    )]
    Locked {
        /// The output.
        path: PathBuf,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(action: impl Into<String>, path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    let action = action.into();
    move |source| Error::Io { action, path: path.to_path_buf(), source }
}

/// Temporary files of one process get distinct names, so two threads writing one path never share one.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: a new hidden file beside it (`.<name>.tmp<pid>.<n>`, created
/// exclusively), its data synced to disk, then renamed over `path`, and the directory synced so the
/// rename survives a crash. On any failure the temporary file is removed and an earlier `path` is
/// left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().ok_or_else(|| Error::NoFileName { path: path.to_path_buf() })?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.tmp{}.{n}", name.to_string_lossy(), std::process::id()));
    let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io("creating", &tmp))?;
    let written = file
        .write_all(bytes)
        .map_err(io("writing", &tmp))
        .and_then(|()| file.sync_all().map_err(io("syncing", &tmp)))
        .and_then(|()| {
            drop(file);
            std::fs::rename(&tmp, path).map_err(io(format!("renaming {} to", tmp.display()), path))
        });
    if written.is_err() {
        // Nothing half-written is left behind; the earlier file, if any, is untouched.
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    sync_dir(dir)
}

/// Makes a rename in `dir` durable (a directory can be opened and synced on Unix only).
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing directory", dir))
}

#[cfg(not(unix))]
#[allow(clippy::unnecessary_wraps)] // the Unix version can fail
fn sync_dir(_dir: &Path) -> Result<()> {
    Ok(())
}

/// Reads at most `limit_bytes` of `path`; a larger input is refused with [`Error::TooLarge`] after
/// `limit_bytes + 1` bytes, so an endless one cannot exhaust memory.
pub fn read_capped(path: &Path, limit_bytes: u64) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(io("opening", path))?;
    let mut bytes = Vec::new();
    file.take(limit_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(io("reading", path))?;
    if bytes.len() as u64 > limit_bytes {
        return Err(Error::TooLarge { path: path.to_path_buf(), limit_bytes });
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text, without a leading byte-order mark.
pub fn read_text_capped(path: &Path, limit_bytes: u64) -> Result<String> {
    let text = String::from_utf8(read_capped(path, limit_bytes)?)
        .map_err(|source| Error::NotUtf8 { path: path.into(), source })?;
    Ok(text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text))
}

/// Takes the exclusive advisory lock of `file` (opened from `path`) without waiting: held until the
/// file is closed, refused with [`Error::Locked`] while another open file holds it. Advisory: it only
/// keeps out processes that take it too.
pub fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(Error::Locked { path: path.to_path_buf() }),
        Err(TryLockError::Error(e)) => Err(io("locking", path)(e)),
    }
}

/// Opens `path` for appending (creating it, not its directory) and takes its exclusive lock: the one
/// way an appending output is opened, so two runs never append to one file.
pub fn open_append_locked(path: &Path) -> Result<File> {
    let file = OpenOptions::new().create(true).append(true).open(path).map_err(io("opening", path))?;
    lock_exclusive(&file, path)?;
    Ok(file)
}

/// The CPU model this machine reports (`/proc/cpuinfo`'s first "model name"), or "unknown CPU" where
/// there is none (another OS, or an architecture whose cpuinfo has no such line).
#[must_use]
pub fn cpu_model() -> String {
    read_text_capped(Path::new("/proc/cpuinfo"), 16 << 20)
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The CPU's generation as `/proc/cpuinfo` gives it for the first CPU ("family 26 model 2 stepping 1"),
/// or `None` where it gives none. Two hosts can report one model name ("AMD EPYC") and be different
/// generations; the collector records this beside the name so that a measurement says which one it was.
#[must_use]
pub fn cpu_signature() -> Option<String> {
    let text = read_text_capped(Path::new("/proc/cpuinfo"), 16 << 20).ok()?;
    cpu_signature_of(&text)
}

/// [`cpu_signature`] of a cpuinfo text: the first CPU's "cpu family", "model" and "stepping" lines.
fn cpu_signature_of(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next()?;
    let field = |name: &str| {
        first.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim();
            (k.trim() == name && !v.is_empty() && v.len() <= 16).then(|| v.to_string())
        })
    };
    let (family, model) = (field("cpu family")?, field("model")?);
    Some(match field("stepping") {
        Some(s) => format!("family {family} model {model} stepping {s}"),
        None => format!("family {family} model {model}"),
    })
}

/// The size of this machine's last-level cache in bytes, from sysfs (the highest cache index of CPU 0), or
/// `None` where sysfs does not say. The collector records it in its hardware note and `--cost-model cpu`
/// matches on it: two hosts that report one CPU model can have different caches.
#[must_use]
pub fn llc_bytes() -> Option<u64> {
    (0..8).rev().find_map(|i| {
        let path = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
        let t = read_text_capped(Path::new(&path), 4096).ok()?;
        let t = t.trim();
        let (num, mult) = match t.strip_suffix('K') {
            Some(n) => (n, 1u64 << 10),
            None => t.strip_suffix('M').map_or((t, 1), |n| (n, 1 << 20)),
        };
        num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on purpose

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shardplan-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn cpu_signature_reads_the_first_cpu() {
        let two = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n\
                   model name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\n";
        assert_eq!(cpu_signature_of(two).as_deref(), Some("family 26 model 2 stepping 1"));
        assert_eq!(cpu_signature_of("cpu family\t: 6\nmodel\t\t: 143\n").as_deref(), Some("family 6 model 143"));
        // "model name" is not "model"; an ARM cpuinfo has neither line.
        assert_eq!(cpu_signature_of("cpu family\t: 6\nmodel name\t: Xeon\n"), None);
        assert_eq!(cpu_signature_of("processor\t: 0\nCPU implementer\t: 0x41\n"), None);
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temporary_file() {
        let dir = scratch("write");
        let path = dir.join("out.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert_eq!(entries(&dir), ["out.json"]);
    }

    #[test]
    fn a_failed_atomic_write_keeps_the_earlier_file_and_removes_its_temporary_file() {
        let dir = scratch("fail");
        // Renaming a file over a non-empty directory fails after the temporary file was written.
        let target = dir.join("taken");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), "kept").unwrap();
        let e = write_atomic(&target, b"new").unwrap_err().to_string();
        assert!(e.contains("renaming") && e.contains("taken"), "{e}");
        assert_eq!(entries(&dir), ["taken"]);
        assert_eq!(std::fs::read_to_string(target.join("inside")).unwrap(), "kept");
        // A path naming no file is refused before anything is created.
        let e = write_atomic(Path::new("/"), b"x").unwrap_err();
        assert!(matches!(e, Error::NoFileName { .. }), "{e}");
    }

    #[test]
    fn capped_reads_refuse_inputs_past_the_limit() {
        let dir = scratch("read");
        let path = dir.join("t.csv");
        std::fs::write(&path, "\u{feff}a,b\n").unwrap();
        assert_eq!(read_text_capped(&path, 100).unwrap(), "a,b\n");
        // Exactly at the limit is read; one byte more is refused, naming the file and the limit.
        assert_eq!(read_capped(&path, 7).unwrap().len(), 7);
        let e = read_capped(&path, 6).unwrap_err().to_string();
        assert!(e.contains("t.csv") && e.contains("larger than 6 bytes"), "{e}");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text_capped(&path, 10).unwrap_err(), Error::NotUtf8 { .. }));
        let e = read_capped(&dir.join("missing"), 10).unwrap_err().to_string();
        assert!(e.contains("opening") && e.contains("missing"), "{e}");
    }

    #[test]
    fn a_second_lock_on_an_output_is_refused_until_the_first_is_released() {
        let dir = scratch("lock");
        let path = dir.join("samples.jsonl");
        let first = open_append_locked(&path).unwrap();
        let e = open_append_locked(&path).unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("samples.jsonl") && msg.contains("another run holds it"), "{msg}");
        drop(first);
        let mut again = open_append_locked(&path).unwrap();
        again.write_all(b"line\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "line\n");
    }
}
