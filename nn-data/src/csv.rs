//! scikit-learn's bundled datasets: the 8x8 digits (`digits.csv.gz`: 64 pixels then the
//! label per line, no header) and the tabular sets (`iris.csv`, `wine_data.csv`,
//! `breast_cancer.csv`: a header `n_samples,n_features,class names...`, then features and
//! the label per line).

use std::path::Path;

use nn_core::Tensor;

use crate::{read_maybe_gz, DataError, Result};

/// Features `[N, F]` (`f32`) and labels `[N]` (`i64`), with the class names when the file
/// has them.
#[derive(Clone, Debug)]
pub struct TabularDataset {
    /// `[N, F]` features.
    pub features: Tensor,
    /// `[N]` class indices.
    pub labels: Tensor,
    /// Class names from the header (empty for the digits).
    pub class_names: Vec<String>,
}

fn parse_rows(path: &Path, text: &str, skip: usize, width: usize) -> Result<(Vec<f32>, Vec<i64>)> {
    let bad = |line: usize, reason: String| DataError::Format {
        path: path.to_path_buf(),
        reason: format!("line {line}: {reason}"),
    };
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().skip(skip).filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != width + 1 {
            return Err(bad(i + 1, format!("expected {} fields, got {}", width + 1, fields.len())));
        }
        for f in &fields[..width] {
            let v = f.trim().parse::<f32>().map_err(|_| bad(i + 1, format!("not a number: {f:?}")))?;
            // `parse` takes "nan" and "inf", and rounds 1e39 to infinity: refused, not
            // carried into training.
            if !v.is_finite() {
                return Err(bad(i + 1, format!("{f:?} is not a finite f32")));
            }
            xs.push(v);
        }
        let label = fields[width].trim();
        let y = label
            .parse::<f64>()
            .ok()
            .filter(|v| v.fract() == 0.0 && *v >= 0.0)
            .ok_or_else(|| bad(i + 1, format!("label {label:?} is not a class index")))?;
        ys.push(y as i64);
    }
    Ok((xs, ys))
}

/// The 8x8 digits, pixels scaled from `0..=16` to `[0, 1]`.
///
/// # Errors
/// [`DataError`] naming the file and line on malformed input.
pub fn load_digits(path: impl AsRef<Path>) -> Result<TabularDataset> {
    let path = path.as_ref();
    let bytes = read_maybe_gz(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| DataError::Format { path: path.to_path_buf(), reason: "not UTF-8 text".into() })?;
    let (xs, ys) = parse_rows(path, &text, 0, 64)?;
    if let Some(bad) = ys.iter().find(|&&y| y > 9) {
        return Err(DataError::Format { path: path.to_path_buf(), reason: format!("label {bad} is not a digit") });
    }
    // Pixels are 0..=16 (scikit-learn's digits): a 0-255 file would load scaled to 0-16.
    if let Some((i, v)) = xs.iter().enumerate().find(|(_, v)| !(0.0..=16.0).contains(*v)) {
        return Err(DataError::Format {
            path: path.to_path_buf(),
            reason: format!("row {}: pixel {v} is outside 0..=16", i / 64 + 1),
        });
    }
    let n = ys.len();
    Ok(TabularDataset {
        features: Tensor::from_vec(xs.into_iter().map(|v| v / 16.0).collect(), &[n, 64]),
        labels: Tensor::from_vec_i64(ys, &[n]),
        class_names: Vec::new(),
    })
}

/// A tabular scikit-learn CSV (unscaled features; standardise them before training).
///
/// # Errors
/// [`DataError`] naming the file and line on malformed input, or when the header's counts
/// disagree with the rows.
pub fn load_sklearn_csv(path: impl AsRef<Path>) -> Result<TabularDataset> {
    let path = path.as_ref();
    let bytes = read_maybe_gz(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| DataError::Format { path: path.to_path_buf(), reason: "not UTF-8 text".into() })?;
    let bad = |reason: String| DataError::Format { path: path.to_path_buf(), reason };
    let header: Vec<&str> = text.lines().next().ok_or_else(|| bad("empty file".into()))?.split(',').collect();
    let parse = |s: &str| s.trim().parse::<usize>().map_err(|_| bad(format!("header: {s:?} is not a count")));
    if header.len() < 3 {
        return Err(bad("header must be `n_samples,n_features,class names...`".into()));
    }
    let (n, f) = (parse(header[0])?, parse(header[1])?);
    let class_names: Vec<String> = header[2..].iter().map(|s| s.trim().to_string()).collect();
    let (xs, ys) = parse_rows(path, &text, 1, f)?;
    if ys.len() != n {
        return Err(bad(format!("header announces {n} samples, the file has {}", ys.len())));
    }
    if let Some(y) = ys.iter().find(|&&y| y as usize >= class_names.len()) {
        return Err(bad(format!("label {y} has no class name ({} classes)", class_names.len())));
    }
    Ok(TabularDataset { features: Tensor::from_vec(xs, &[n, f]), labels: Tensor::from_vec_i64(ys, &[n]), class_names })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_header_and_rows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        std::fs::write(&p, "2,3,a,b\n1,2,3,0\n4,5,6,1\n").unwrap();
        let d = load_sklearn_csv(&p).unwrap();
        assert_eq!(d.features.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(d.labels.to_vec_i64(), vec![0, 1]);
        assert_eq!(d.class_names, ["a", "b"]);
        std::fs::write(&p, "2,3,a,b\n1,2,3,0\n4,x,6,1\n").unwrap();
        let e = load_sklearn_csv(&p).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("\"x\""), "{e}");
        std::fs::write(&p, "3,3,a,b\n1,2,3,0\n").unwrap();
        assert!(load_sklearn_csv(&p).unwrap_err().to_string().contains("announces 3 samples"));
        // NaN, infinity, and a value past f32's range are refused, by line.
        for (cell, line) in [("nan", 2), ("inf", 2), ("1e39", 3)] {
            let text = if line == 2 {
                format!("2,3,a,b\n1,{cell},3,0\n4,5,6,1\n")
            } else {
                format!("2,3,a,b\n1,2,3,0\n4,{cell},6,1\n")
            };
            std::fs::write(&p, text).unwrap();
            let e = load_sklearn_csv(&p).unwrap_err().to_string();
            assert!(e.contains(&format!("line {line}: \"{cell}\" is not a finite f32")), "{e}");
        }
    }

    /// Digits' pixels are 0..=16: a 0-255 file is refused, not loaded scaled to 0-16.
    #[test]
    fn digits_pixels_outside_0_to_16_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("digits.csv");
        std::fs::write(&p, format!("{}3\n{}255,4\n", "1,".repeat(64), "0,".repeat(63))).unwrap();
        let e = load_digits(&p).unwrap_err().to_string();
        assert!(e.contains("row 2: pixel 255 is outside 0..=16"), "{e}");
    }

    /// A gzip file of several members (`cat a.gz b.gz`, bgzip) is read whole: a
    /// single-member decoder returned the first member's rows only, with no error.
    #[test]
    fn every_member_of_a_gzip_file_is_read() {
        let gz = |text: &str| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut e, text.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        let row = |label: usize| format!("{}{label}\n", "1,".repeat(64));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("digits.csv.gz");
        let mut bytes = gz(&(0..3).map(row).collect::<String>());
        bytes.extend(gz(&(3..5).map(row).collect::<String>()));
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(load_digits(&p).unwrap().labels.to_vec_i64(), [0, 1, 2, 3, 4]);
        // Bytes after the last member that are not gzip: an error, not a shorter dataset.
        bytes.extend(b"trailing");
        std::fs::write(&p, &bytes).unwrap();
        assert!(load_digits(&p).is_err());
    }
}
