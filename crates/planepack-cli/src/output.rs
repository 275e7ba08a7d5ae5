//! Writing outputs so that a failure never leaves a file that looks valid.
//!
//! Every output is written to a temporary file beside its destination and renamed into place
//! only after the last byte is written (and, for containers, verified). On any error the
//! temporary file is deleted when it is dropped. An existing destination is refused unless
//! `--force`, and this is checked for every file before any work starts.

use crate::fail::{Code, Fail};
use std::path::{Path, PathBuf};

/// Refuse existing outputs without `force`.
pub fn check_free(paths: &[PathBuf], force: bool) -> Result<(), Fail> {
    if force {
        return Ok(());
    }
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(Fail::new(
            Code::Exists,
            format!("{}: output exists (use --force to replace it)", p.display()),
        )),
        None => Ok(()),
    }
}

/// A temporary file in `dest`'s folder.
pub fn temp_beside(dest: &Path) -> Result<tempfile::NamedTempFile, Fail> {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".planepack-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| Fail::new(Code::Io, format!("{}: cannot write: {e}", dest.display())))
}

/// Move a finished temporary file to `dest`.
pub fn persist(tmp: tempfile::NamedTempFile, dest: &Path, force: bool) -> Result<(), Fail> {
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
