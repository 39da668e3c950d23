//! Datasets for the `nn` framework: an IDX reader (MNIST, Fashion-MNIST; gzip or not), a
//! reader for scikit-learn's bundled CSV sets, a seeded shuffling mini-batch loader, and the
//! sampler that gives each process of a data-parallel job its share ([`DistributedSampler`]).
//!
//! ```
//! use nn_core::Tensor;
//! use nn_data::DataLoader;
//! let x = Tensor::arange(0.0, 10.0, 1.0).reshape(&[10, 1]);
//! let y = Tensor::from_vec_i64((0..10).collect(), &[10]);
//! let loader = DataLoader::new(x, y, 4).shuffle(7);
//! let sizes: Vec<usize> = loader.epoch(0).map(|(xb, _)| xb.shape()[0]).collect();
//! assert_eq!(sizes, [4, 4, 2]);
//! // The same seed and epoch give the same order; another epoch another one.
//! let first = |e| loader.epoch(e).next().unwrap().1.to_vec_i64();
//! assert_eq!(first(3), first(3));
//! assert_ne!(first(0), first(1));
//! ```

mod csv;
mod idx;
mod loader;
mod sampler;

pub use csv::{load_digits, load_sklearn_csv, TabularDataset};
pub use idx::{load_mnist, read_idx, IdxArray, Split};
pub use loader::DataLoader;
pub use sampler::DistributedSampler;

use std::path::PathBuf;

/// Errors reading a dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be read.
    #[error("i/o error on `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file's content is not what the format requires.
    #[error("`{}`: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line or byte where it is.
        reason: String,
    },
}

/// `Result` with [`DataError`].
pub type Result<T> = std::result::Result<T, DataError>;

/// Reads a whole file, transparently gunzipping it when it starts with the gzip magic:
/// every member of it (`cat a.gz b.gz` and bgzip files hold several; a single-member
/// decoder would stop after the first and return part of the data), and trailing bytes
/// that are not a gzip member are an error.
pub(crate) fn read_maybe_gz(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| DataError::Io { path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(io)?;
        Ok(out)
    } else {
        Ok(raw)
    }
}
