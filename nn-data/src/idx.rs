//! The IDX format of MNIST and Fashion-MNIST: a magic number (two zero bytes, a type byte,
//! a dimension count), big-endian `u32` dimensions, then the values.

use std::path::{Path, PathBuf};

use nn_core::Tensor;

use crate::{read_maybe_gz, DataError, Result};

/// An unsigned-byte IDX array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxArray {
    /// The dimensions (`[60000, 28, 28]` for MNIST training images).
    pub dims: Vec<usize>,
    /// The values, row-major.
    pub data: Vec<u8>,
}

/// Reads an IDX file of unsigned bytes (gzip-compressed or not).
///
/// # Errors
/// [`DataError::Io`], or [`DataError::Format`] for a bad magic number, an element type
/// other than unsigned byte, or a length that does not match the dimensions.
pub fn read_idx(path: impl AsRef<Path>) -> Result<IdxArray> {
    let path = path.as_ref();
    let bytes = read_maybe_gz(path)?;
    let bad = |reason: String| DataError::Format { path: path.to_path_buf(), reason };
    if bytes.len() < 4 || bytes[0] != 0 || bytes[1] != 0 {
        return Err(bad("not an IDX file (the magic number must start with two zero bytes)".into()));
    }
    if bytes[2] != 0x08 {
        return Err(bad(format!("element type 0x{:02x} is not supported (only 0x08, unsigned byte)", bytes[2])));
    }
    let rank = bytes[3] as usize;
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(bad(format!(
            "truncated header: {rank} dimensions need {header} bytes, the file has {}",
            bytes.len()
        )));
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().expect("4 bytes")) as usize)
        .collect();
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
    if bytes.len() - header != n {
        return Err(bad(format!("dimensions {dims:?} need {n} values, the file has {}", bytes.len() - header)));
    }
    Ok(IdxArray { dims, data: bytes[header..].to_vec() })
}

/// Which half of a dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training set (`train-*`).
    Train,
    /// The test set (`t10k-*`).
    Test,
}

/// Loads MNIST-format images as `[N, 1, 28, 28]` `f32` in `[0, 1]` and labels as `[N]`
/// `i64`, from `dir` holding `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`.
///
/// # Errors
/// As [`read_idx`], and [`DataError::Format`] when images and labels disagree.
pub fn load_mnist(dir: impl AsRef<Path>, split: Split) -> Result<(Tensor, Tensor)> {
    let dir = dir.as_ref();
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let find = |stem: String| -> Result<PathBuf> {
        let plain = dir.join(&stem);
        let gz = dir.join(format!("{stem}.gz"));
        if gz.exists() {
            Ok(gz)
        } else if plain.exists() {
            Ok(plain)
        } else {
            Err(DataError::Io {
                path: gz,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "neither the file nor its .gz exists"),
            })
        }
    };
    let img_path = find(format!("{prefix}-images-idx3-ubyte"))?;
    let lbl_path = find(format!("{prefix}-labels-idx1-ubyte"))?;
    let images = read_idx(&img_path)?;
    let labels = read_idx(&lbl_path)?;
    if images.dims.len() != 3 || labels.dims.len() != 1 || images.dims[0] != labels.dims[0] {
        return Err(DataError::Format {
            path: img_path,
            reason: format!("images {:?} and labels {:?} do not describe the same samples", images.dims, labels.dims),
        });
    }
    let (n, h, w) = (images.dims[0], images.dims[1], images.dims[2]);
    let x = Tensor::from_vec(images.data.iter().map(|&v| v as f32 / 255.0).collect(), &[n, 1, h, w]);
    let y = Tensor::from_vec_i64(labels.data.iter().map(|&v| v as i64).collect(), &[n]);
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn reads_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = vec![0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3];
        b.extend([1, 2, 3, 4, 5, 6]);
        let p = write(dir.path(), "a.idx", &b);
        assert_eq!(read_idx(&p).unwrap(), IdxArray { dims: vec![2, 3], data: vec![1, 2, 3, 4, 5, 6] });
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &b).unwrap();
        let p = write(dir.path(), "a.idx.gz", &gz.finish().unwrap());
        assert_eq!(read_idx(&p).unwrap().dims, vec![2, 3]);
    }

    #[test]
    fn rejects_bad_files_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_idx(write(dir.path(), "m", &[1, 2, 3, 4])).unwrap_err().to_string();
        assert!(e.contains("magic number"), "{e}");
        let e = read_idx(write(dir.path(), "t", &[0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0])).unwrap_err().to_string();
        assert!(e.contains("element type 0x0d"), "{e}");
        let e = read_idx(write(dir.path(), "s", &[0, 0, 8, 1, 0, 0, 0, 5, 1, 2])).unwrap_err().to_string();
        assert!(e.contains("need 5 values, the file has 2"), "{e}");
        let e = read_idx(write(dir.path(), "h", &[0, 0, 8, 3, 0, 0])).unwrap_err().to_string();
        assert!(e.contains("truncated header"), "{e}");
        let e =
            read_idx(write(dir.path(), "o", &[0, 0, 8, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255]))
                .unwrap_err();
        assert!(e.to_string().contains("overflow") || e.to_string().contains("need"), "{e}");
        assert!(matches!(read_idx(dir.path().join("missing")).unwrap_err(), DataError::Io { .. }));
    }
}
