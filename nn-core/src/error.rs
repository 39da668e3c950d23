//! The crate's error type: everything that can fail because of the outside world.
//!
//! Programming errors inside tensor operations (two shapes that cannot be multiplied, a
//! dimension out of range) panic with a message naming the op and the operands, like
//! PyTorch raises. Operations on files, user-provided data and state dicts return
//! [`Result<_, Error>`](Error) instead, because a caller can reasonably recover from them.

use std::path::PathBuf;

use crate::dtype::DType;

/// Errors returned by fallible operations of `nn-core`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The number of values does not match the requested shape.
    #[error("{op}: shape {shape:?} needs {expected} elements, got {got}")]
    ElementCount {
        /// The constructor that was called.
        op: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
        /// `shape.iter().product()`.
        expected: usize,
        /// The number of values supplied.
        got: usize,
    },
    /// A value-dependent operation was asked of a tensor that has no values.
    #[error("{op}: tensor on the meta device has no values (shape {shape:?}); materialise it first with `to_device(Device::Cpu)`")]
    MetaHasNoValues {
        /// The operation that needed values.
        op: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A dtype that the operation does not support.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype it was given.
        dtype: DType,
    },
    /// An I/O error, with the path it happened on.
    #[error("i/o error on `{}`: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
