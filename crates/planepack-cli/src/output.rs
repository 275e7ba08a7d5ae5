//! Writing outputs so that a failure never leaves a file that looks valid.
//!
//! Every output is written to a temporary file beside its destination and renamed into place
//! only after the last byte is written (and, for containers, verified). On any error the
//! temporary file is deleted when it is dropped, and on Ctrl-C or SIGTERM by the handler
//! [`remove_temps_on_signal`] installs. An existing destination is refused unless `--force`,
//! and this is checked for every file before any work starts; even with `--force` an output
//! that is not a regular file (a device, a FIFO, a symbolic link) or that is the input itself
//! is never replaced. Outputs get their input's permission bits, as zstd's do.

use crate::fail::{Code, Fail};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Temporary files in progress, for the signal handler.
static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// On SIGINT or SIGTERM (and SIGHUP), delete every temporary file in progress and exit with
/// 130, the shell's code for an interrupted command.
pub fn remove_temps_on_signal() {
    let installed = ctrlc::set_handler(|| {
        if let Ok(temps) = TEMPS.lock() {
            for p in temps.iter() {
                let _ = std::fs::remove_file(p);
            }
        }
        std::process::exit(130);
    });
    // Without a handler (another one installed), temporary files are still deleted on every
    // error; only a kill by signal would leave one.
    let _ = installed;
}

/// Refuse, before any work: an output that is an input, an output that exists and is not a
/// regular file (even with `force`), and an existing output without `force`.
pub fn check_outputs(pairs: &[(PathBuf, PathBuf)], force: bool) -> Result<(), Fail> {
    for (input, out) in pairs {
        let Ok(meta) = std::fs::symlink_metadata(out) else {
            continue;
        };
        if !meta.is_file() {
            return Err(Fail::new(
                Code::Exists,
                format!(
                    "{}: output exists and is not a regular file; not replacing it",
                    out.display()
                ),
            ));
        }
        if same_file(input, out) {
            return Err(Fail::new(
                Code::Usage,
                format!("{}: the output is the input", out.display()),
            ));
        }
        if !force {
            return Err(Fail::new(
                Code::Exists,
                format!(
                    "{}: output exists (use --force to replace it)",
                    out.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Are `a` and `b` the same file (device and inode; by canonical path elsewhere)?
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// A temporary output file, deleted on drop (an error) or on a signal, unless persisted.
pub struct Temp {
    file: Option<tempfile::NamedTempFile>,
}

impl Temp {
    pub fn as_file(&self) -> &std::fs::File {
        self.file
            .as_ref()
            .expect("present until persisted")
            .as_file()
    }

    pub fn path(&self) -> &Path {
        self.file.as_ref().expect("present until persisted").path()
    }

    /// Give the file the permission bits of `like` (the input), as zstd does.
    pub fn permissions_of(&self, like: &Path) -> Result<(), Fail> {
        let perm = std::fs::metadata(like)
            .map_err(|e| Fail::io(like, e))?
            .permissions();
        self.as_file()
            .set_permissions(perm)
            .map_err(|e| Fail::io(self.path(), e))
    }

    fn take(mut self) -> tempfile::NamedTempFile {
        let f = self.file.take().expect("present until persisted");
        unregister(f.path());
        f
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(f) = &self.file {
            unregister(f.path());
        }
    }
}

fn unregister(p: &Path) {
    if let Ok(mut temps) = TEMPS.lock() {
        temps.retain(|t| t != p);
    }
}

/// A temporary file in `dest`'s folder.
pub fn temp_beside(dest: &Path) -> Result<Temp, Fail> {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file = tempfile::Builder::new()
        .prefix(".planepack-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| Fail::new(Code::Io, format!("{}: cannot write: {e}", dest.display())))?;
    if let Ok(mut temps) = TEMPS.lock() {
        temps.push(file.path().to_owned());
    }
    Ok(Temp { file: Some(file) })
}

/// Move a finished temporary file to `dest`.
pub fn persist(tmp: Temp, dest: &Path, force: bool) -> Result<(), Fail> {
    let tmp = tmp.take();
    let r = if force {
        tmp.persist(dest).map(|_| ())
    } else {
        tmp.persist_noclobber(dest).map(|_| ())
    };
    r.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            Fail::new(
                Code::Exists,
                format!(
                    "{}: output exists (use --force to replace it)",
                    dest.display()
                ),
            )
        } else {
            Fail::new(
                Code::Io,
                format!("{}: cannot write: {}", dest.display(), e.error),
            )
        }
    })
}
