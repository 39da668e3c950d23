//! [`Extra`]: the values a training loop keeps in a checkpoint beside the model — its
//! configuration, a best accuracy, a run name, a loss curve — as JSON holds them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One value of [`Checkpoint::extra`](super::Checkpoint::extra): JSON's kinds, with
/// integers kept exact (`u64` seeds, `i64` counts) and floats finite (JSON has no NaN or
/// infinity, so `save` refuses them rather than write a `null` back).
///
/// ```
/// use nn_core::checkpoint::Extra;
/// let config = Extra::map([("n_layer", Extra::from(12)), ("bias", Extra::from(false)), ("name", "gpt2".into())]);
/// assert_eq!(config.get("n_layer").and_then(Extra::as_i64), Some(12));
/// assert_eq!(config.get("name").and_then(Extra::as_str), Some("gpt2"));
/// assert_eq!(Extra::from(0.5).as_f64(), Some(0.5));
/// assert_eq!(Extra::from(3).as_f64(), Some(3.0), "an integer reads as a float too");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Extra {
    /// JSON's `null` (Python's `None`).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer above `i64::MAX` (a `u64` seed).
    UInt(u64),
    /// A finite float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Extra>),
    /// A map, its keys sorted.
    Map(BTreeMap<String, Extra>),
}

impl Extra {
    /// A map of `entries`.
    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Extra)>) -> Extra {
        Extra::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The number, as `f64` (integers too, rounded where past 2^53).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Extra::Float(v) => Some(v),
            Extra::Int(v) => Some(v as f64),
            Extra::UInt(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The integer, when it is one that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Extra::Int(v) => Some(v),
            _ => None,
        }
    }

    /// The integer, when it is a non-negative one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Extra::Int(v) => u64::try_from(v).ok(),
            Extra::UInt(v) => Some(v),
            _ => None,
        }
    }

    /// The boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Extra::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Extra::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The list.
    pub fn as_list(&self) -> Option<&[Extra]> {
        match self {
            Extra::List(l) => Some(l),
            _ => None,
        }
    }

    /// The value under `key`, when this is a map.
    pub fn get(&self, key: &str) -> Option<&Extra> {
        match self {
            Extra::Map(m) => m.get(key),
            _ => None,
        }
    }

    /// The path (`config.lr`, `losses[3]`) and value of the first float inside that is
    /// not finite, which JSON cannot hold.
    pub(crate) fn first_non_finite(&self, at: &str) -> Option<(String, f64)> {
        match self {
            Extra::Float(v) if !v.is_finite() => Some((at.to_string(), *v)),
            Extra::List(l) => l.iter().enumerate().find_map(|(i, e)| e.first_non_finite(&format!("{at}[{i}]"))),
            Extra::Map(m) => m.iter().find_map(|(k, e)| e.first_non_finite(&format!("{at}.{k}"))),
            _ => None,
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Extra {
            fn from(v: $t) -> Extra {
                Extra::Int(i64::from(v))
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<u64> for Extra {
    fn from(v: u64) -> Extra {
        i64::try_from(v).map_or(Extra::UInt(v), Extra::Int)
    }
}

impl From<usize> for Extra {
    fn from(v: usize) -> Extra {
        Extra::from(v as u64)
    }
}

impl From<f64> for Extra {
    fn from(v: f64) -> Extra {
        Extra::Float(v)
    }
}

impl From<f32> for Extra {
    fn from(v: f32) -> Extra {
        Extra::Float(f64::from(v))
    }
}

impl From<bool> for Extra {
    fn from(v: bool) -> Extra {
        Extra::Bool(v)
    }
}

impl From<&str> for Extra {
    fn from(v: &str) -> Extra {
        Extra::Str(v.to_string())
    }
}

impl From<String> for Extra {
    fn from(v: String) -> Extra {
        Extra::Str(v)
    }
}

impl<T: Into<Extra>> From<Vec<T>> for Extra {
    fn from(v: Vec<T>) -> Extra {
        Extra::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Extra>> From<Option<T>> for Extra {
    fn from(v: Option<T>) -> Extra {
        v.map_or(Extra::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_json_exactly() {
        let v = Extra::map([
            ("seed", Extra::from(u64::MAX)),
            ("step", Extra::from(-3)),
            ("lr", Extra::from(6e-4)),
            ("whole", Extra::from(3.0)),
            ("name", "shakespeare_char".into()),
            ("bias", false.into()),
            ("none", Extra::Null),
            ("layers", vec![1, 2].into()),
            ("nested", Extra::map([("dropout", Extra::from(0.1))])),
        ]);
        let json = serde_json::to_string(&v).unwrap();
        let back: Extra = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v, "{json}");
        assert_eq!(back.get("whole"), Some(&Extra::Float(3.0)), "a float stays a float");
        assert_eq!(back.get("seed").and_then(Extra::as_u64), Some(u64::MAX));
    }

    #[test]
    fn a_nan_inside_is_found_by_its_path() {
        let v = Extra::map([("curve", vec![1.0, f64::NAN].into())]);
        assert_eq!(v.first_non_finite("extra").map(|(p, _)| p), Some("extra.curve[1]".to_string()));
        assert_eq!(Extra::from(1.0).first_non_finite("x"), None);
    }
}
