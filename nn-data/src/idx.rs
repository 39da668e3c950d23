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

/// The side of an MNIST image, in pixels.
const MNIST_SIDE: usize = 28;
/// MNIST's classes (digits, or Fashion-MNIST's ten kinds of clothing).
const MNIST_CLASSES: usize = 10;

/// Which half of a dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training set (`train-*`).
    Train,
    /// The test set (`t10k-*`).
    Test,
}

/// Loads MNIST-format images as `[N, 1, 28, 28]` `f32` in `[0, 1]` and labels as `[N]`
/// `i64` classes `0..10`, from `dir` holding
/// `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`. Where both a file and its `.gz` are
/// there (torchvision's raw folders), the file is read and the `.gz` must hold the same
/// values.
///
/// # Errors
/// As [`read_idx`], and [`DataError::Format`] when images and labels disagree, the images
/// are not 28x28 (naming the dimensions found), a label is not a class 0-9 (naming the
/// first such label and its index), or a file and its `.gz` differ.
pub fn load_mnist(dir: impl AsRef<Path>, split: Split) -> Result<(Tensor, Tensor)> {
    let dir = dir.as_ref();
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    // torchvision's raw folders hold both `X` and `X.gz`. `X` is what torchvision reads;
    // a `.gz` beside it must hold the same array (one was replaced and not the other:
    // reading either alone would silently train on the wrong data).
    let read = |stem: String| -> Result<(PathBuf, IdxArray)> {
        let plain = dir.join(&stem);
        let gz = dir.join(format!("{stem}.gz"));
        match (plain.exists(), gz.exists()) {
            (true, has_gz) => {
                let array = read_idx(&plain)?;
                if has_gz && read_idx(&gz)? != array {
                    return Err(DataError::Format {
                        path: plain,
                        reason: format!("differs from {} beside it: remove the stale one of the two", gz.display()),
                    });
                }
                Ok((plain, array))
            }
            (false, true) => Ok((gz.clone(), read_idx(&gz)?)),
            (false, false) => Err(DataError::Io {
                path: gz,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "neither the file nor its .gz exists"),
            }),
        }
    };
    let (img_path, images) = read(format!("{prefix}-images-idx3-ubyte"))?;
    let (label_path, labels) = read(format!("{prefix}-labels-idx1-ubyte"))?;
    if images.dims.len() != 3 || labels.dims.len() != 1 || images.dims[0] != labels.dims[0] {
        return Err(DataError::Format {
            path: img_path,
            reason: format!("images {:?} and labels {:?} do not describe the same samples", images.dims, labels.dims),
        });
    }
    let (n, h, w) = (images.dims[0], images.dims[1], images.dims[2]);
    // What every caller takes MNIST to be: 28x28 images (a 32x32 set would load, then fail
    // deep inside a layer) and classes 0-9 (a label of 10 would index past a 10-way
    // classifier's logits).
    if (h, w) != (MNIST_SIDE, MNIST_SIDE) {
        return Err(DataError::Format {
            path: img_path,
            reason: format!("images are {h}x{w} (dimensions {:?}), not MNIST's {MNIST_SIDE}x{MNIST_SIDE}", images.dims),
        });
    }
    if let Some(i) = labels.data.iter().position(|&l| usize::from(l) >= MNIST_CLASSES) {
        return Err(DataError::Format {
            path: label_path,
            reason: format!("label {} at index {i} is not a class 0-{}", labels.data[i], MNIST_CLASSES - 1),
        });
    }
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

    /// An unsigned-byte IDX file's bytes: the header for `dims`, then `data`.
    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            b.extend(d.to_be_bytes());
        }
        b.extend(data);
        b
    }

    /// Images that are not 28x28 are refused naming the file and the dimensions found;
    /// a label that is not a class 0-9 naming the file, the label and its index.
    #[test]
    fn mnist_images_must_be_28x28_and_labels_classes() {
        let dir = tempfile::tempdir().unwrap();
        let labels = write(dir.path(), "t10k-labels-idx1-ubyte", &idx(&[3], &[0, 9, 4]));
        let images = write(dir.path(), "t10k-images-idx3-ubyte", &idx(&[3, 32, 32], &[0; 3 * 32 * 32]));
        let e = load_mnist(dir.path(), Split::Test).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(&e, DataError::Format { path, .. } if *path == images), "{msg}");
        assert!(msg.contains("images are 32x32 (dimensions [3, 32, 32]), not MNIST's 28x28"), "{msg}");
        write(dir.path(), "t10k-images-idx3-ubyte", &idx(&[3, 28, 28], &[0; 3 * 784]));
        let (x, y) = load_mnist(dir.path(), Split::Test).unwrap();
        assert_eq!((x.shape(), y.to_vec_i64()), (&[3, 1, 28, 28][..], vec![0, 9, 4]));
        write(dir.path(), "t10k-labels-idx1-ubyte", &idx(&[3], &[0, 10, 255]));
        let e = load_mnist(dir.path(), Split::Test).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(&e, DataError::Format { path, .. } if *path == labels), "{msg}");
        assert!(msg.contains("label 10 at index 1 is not a class 0-9"), "{msg}");
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

    /// A torchvision raw folder holds each file twice, plain and gzip: both are read, and
    /// a pair that differs is refused, naming both.
    #[test]
    fn mnist_files_held_twice_must_agree() {
        let dir = tempfile::tempdir().unwrap();
        let images = |fill: u8| idx(&[2, 28, 28], &[fill; 2 * 784]);
        let gz = |b: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut e, b).unwrap();
            e.finish().unwrap()
        };
        let labels = idx(&[2], &[3, 7]);
        write(dir.path(), "train-labels-idx1-ubyte.gz", &gz(&labels));
        write(dir.path(), "train-images-idx3-ubyte.gz", &gz(&images(255)));
        let (x, y) = load_mnist(dir.path(), Split::Train).unwrap();
        assert_eq!((x.shape(), y.to_vec_i64()), (&[2, 1, 28, 28][..], vec![3, 7]));
        write(dir.path(), "train-images-idx3-ubyte", &images(255));
        assert_eq!(load_mnist(dir.path(), Split::Train).unwrap().0.to_vec(), vec![1.0; 2 * 784]);
        write(dir.path(), "train-images-idx3-ubyte", &images(0));
        let e = load_mnist(dir.path(), Split::Train).unwrap_err().to_string();
        assert!(
            e.contains("train-images-idx3-ubyte`: differs from") && e.contains("train-images-idx3-ubyte.gz"),
            "{e}"
        );
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
