//! Errors as the command reports them: a message that names the file (and the tensor, where
//! the container's error does), and an exit code by category.

use std::path::Path;

/// Exit codes (documented in `planepack --help` and the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Internal = 1,
    Usage = 2,
    InvalidInput = 3,
    Corrupt = 4,
    Io = 5,
    Exists = 6,
}

#[derive(Debug)]
pub struct Fail {
    pub code: Code,
    pub message: String,
}

impl Fail {
    pub fn new(code: Code, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }

    pub fn io(path: &Path, e: std::io::Error) -> Fail {
        Fail::new(Code::Io, format!("{}: {e}", path.display()))
    }

    /// A container-library error about `path`.
    pub fn at(path: &Path, e: planepack_container::Error) -> Fail {
        use planepack_container::Error as E;
        let code = match &e {
            E::Internal(_) => Code::Internal,
            E::InvalidInput(_) | E::Codec { .. } => Code::InvalidInput,
            E::Corrupt(_) => Code::Corrupt,
            E::Io(_) | E::Output(_) => Code::Io,
        };
        Fail::new(code, format!("{}: {e}", path.display()))
    }

    /// A container-library error while turning `input` into `output`: a failed write (a full
    /// disk) names the output, anything else the input.
    pub fn between(input: &Path, output: &Path, e: planepack_container::Error) -> Fail {
        match e {
            planepack_container::Error::Output(io) => Fail::io(output, io),
            e => Fail::at(input, e),
        }
    }
}
