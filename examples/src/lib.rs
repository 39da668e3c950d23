//! Shared helpers of the example binaries: dataset readers and small utilities.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The repository's `data/` folder (examples run from any working directory).
pub fn repo_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("data")
}

/// A labelled dataset held in memory: `features` is row-major `[len, dim]`.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Row-major feature matrix.
    pub features: Vec<f32>,
    /// One class index per row.
    pub labels: Vec<i64>,
    /// Features per row.
    pub dim: usize,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// Reads scikit-learn's `digits.csv.gz` (64 pixel values in `0..=16`, then the label),
/// scaling pixels to `[0, 1]`.
pub fn load_digits(path: &Path) -> std::io::Result<Dataset> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path)?).read_to_string(&mut text)?;
    let bad = |line: usize, what: &str| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}:{line}: {what}", path.display()))
    };
    let (mut features, mut labels) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let vals: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse::<f32>().map_err(|_| bad(i + 1, &format!("not a number: {v:?}"))))
            .collect::<Result<_, _>>()?;
        if vals.len() != 65 {
            return Err(bad(i + 1, &format!("expected 65 fields, got {}", vals.len())));
        }
        features.extend(vals[..64].iter().map(|v| v / 16.0));
        let label = vals[64];
        if !(0.0..=9.0).contains(&label) || label.fract() != 0.0 {
            return Err(bad(i + 1, &format!("label {label} is not a digit")));
        }
        labels.push(label as i64);
    }
    Ok(Dataset { features, labels, dim: 64 })
}
