//! # Saving and loading
//!
//! A model's [`state_dict`](crate::Module::state_dict) holds its parameters and persistent
//! buffers under PyTorch's dotted keys, and saves as safetensors: a file nn writes loads
//! in PyTorch (`safetensors.torch.load_file`, then `load_state_dict`) with no key
//! remapping, and the other way round. Saves are atomic (a temporary file renamed into
//! place); loads treat the file as untrusted (regular files only, the header checked in
//! full before any tensor is built). A training run's whole state is a
//! [`Checkpoint`](crate::checkpoint::Checkpoint) (see [the training chapter](super::training)).
//!
//! ## Safetensors state dicts
//!
//! [`Module::save`](crate::Module::save) and [`Module::load`](crate::Module::load) (strict)
//! go through a file; [`StateDict`](crate::StateDict) is the dictionary itself, with
//! [`save`](crate::StateDict::save) and [`load`](crate::StateDict::load):
//! ```
//! use nn::prelude::*;
//! use nn::layers::{BatchNorm1d, Linear, Sequential};
//! use nn::StateDict;
//!
//! let dir = std::env::temp_dir().join(format!("nn-guide-saving-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.safetensors");
//!
//! let model = Sequential::new().add(Linear::new(3, 2)).add(BatchNorm1d::new(2));
//! let sd = model.state_dict();
//! let keys: Vec<&str> = sd.keys().collect(); // PyTorch's names, in PyTorch's order
//! assert_eq!(keys[..4], ["0.weight", "0.bias", "1.weight", "1.bias"]);
//! assert_eq!(keys[4..], ["1.running_mean", "1.running_var", "1.num_batches_tracked"]); // buffers too
//! model.save(&path)?;
//! let back = StateDict::load(&path)?; // in the file's order (safetensors sorts its entries)
//! assert!(back.len() == keys.len() && keys.iter().all(|k| back.contains_key(k)));
//! assert_eq!(back.get("1.num_batches_tracked").unwrap().dtype(), DType::I64); // dtypes kept
//!
//! let mut other = Sequential::new().add(Linear::new(3, 2)).add(BatchNorm1d::new(2));
//! other.load(&path)?;
//! let weight = |m: &Sequential| m.state_dict().get("0.weight").unwrap().to_vec();
//! assert_eq!(weight(&other), weight(&model));
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Strict and non-strict loads
//!
//! [`load_state_dict(&sd, strict)`](crate::Module::load_state_dict) is PyTorch's. Strict,
//! a missing or unexpected key is an error that lists every one (with "did you mean" for a
//! near miss); non-strict, the same keys come back in the report
//! ([`IncompatibleKeys`](crate::IncompatibleKeys)). A shape or dtype that does not fit is
//! an error either way. On any error the model is exactly as it was:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::StateDict;
//!
//! let mut lin = Linear::new(3, 2);
//! let before = lin.weight.to_vec();
//! let mut sd = StateDict::new();
//! sd.insert("weight".to_string(), Tensor::ones(&[2, 3]));
//! sd.insert("wieght_scale".to_string(), Tensor::ones(&[1]));
//!
//! let e = lin.load_state_dict(&sd, true).unwrap_err().to_string();
//! assert!(e.contains("error(s) in loading state dict for Linear"), "{e}");
//! assert!(e.contains("missing key(s): \"bias\"") && e.contains("unexpected key(s): \"wieght_scale\""), "{e}");
//! assert_eq!(lin.weight.to_vec(), before); // a refused load changes nothing
//!
//! let report = lin.load_state_dict(&sd, false)?; // strict=False
//! assert_eq!(report.missing_keys, ["bias"]);
//! assert_eq!(report.unexpected_keys, ["wieght_scale"]);
//! assert_eq!(lin.weight.to_vec(), vec![1.0; 6]); // what matched is loaded
//!
//! let mut wrong = StateDict::new();
//! wrong.insert("weight".to_string(), Tensor::ones(&[3, 3]));
//! let e = lin.load_state_dict(&wrong, false).unwrap_err().to_string();
//! assert!(e.contains("\"weight\" is [3, 3]") && e.contains("[2, 3]"), "{e}");
//! # Ok::<(), nn::Error>(())
//! ```
//! A state dict saved from a wrapped model (`torch.compile`'s `_orig_mod.`, DDP's
//! `module.`) gets a one-line error saying so;
//! [`StateDict::strip_prefix`](crate::StateDict::strip_prefix) and
//! [`add_prefix`](crate::StateDict::add_prefix) rename every key.
//!
//! ## PyTorch's own files: `StateDict::load_pytorch`
//!
//! What `torch.save(model.state_dict(), path)` writes (`.pt`, `.pth`,
//! `pytorch_model.bin`) reads without Python:
//! [`StateDict::load_pytorch`](crate::StateDict::load_pytorch) is
//! `torch.load(path, weights_only=True, map_location="cpu")`. Its unpickler runs no code:
//! the tensor-rebuild globals are interpreted, and anything else is an error naming it.
//! The file below is `torch.nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).state_dict()`,
//! saved by PyTorch (`tests/fixtures/pytorch/torch_files.py`):
//! ```
//! use nn::prelude::*;
//! use nn::layers::{BatchNorm1d, Linear, Sequential};
//! use nn::StateDict;
//!
//! let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pytorch/pickle");
//! let sd = StateDict::load_pytorch(fixtures.join("module.pt"))?;
//! let mut model = Sequential::new().add(Linear::new(3, 2)).add(BatchNorm1d::new(2));
//! model.load_state_dict(&sd, true)?; // PyTorch's keys, unchanged
//! assert_eq!(model.state_dict().get("1.num_batches_tracked").unwrap().to_vec_i64(), [1]);
//!
//! // A pickle that would call `eval` is refused by name; nothing runs.
//! let e = StateDict::load_pytorch(fixtures.join("eval.pt")).unwrap_err().to_string();
//! assert!(e.contains("the global `__builtin__.eval` is not in the tensor-rebuild set"), "{e}");
//! # Ok::<(), nn::Error>(())
//! ```
//! A whole training checkpoint pickled as a dict (`torch.save({"model": ..., "epoch": 3})`)
//! is refused, naming the entry that is not a tensor: save the `state_dict()` alone.
//!
//! ## The meta device and `assign`
//!
//! A model built inside [`with_device(Device::Meta, ..)`](crate::with_device) has shapes
//! and dtypes but no values, whatever its size (PyTorch's `with torch.device("meta"):`);
//! loading a state dict materialises it. `load_state_dict` gives each meta entry the
//! module's dtype; [`load_state_dict_with`](crate::module::ModuleExt::load_state_dict_with)
//! with `assign: true` (PyTorch's `assign=True`) takes the file's tensors as they are,
//! dtype included, without copying:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::{LoadStateDictConfig, StateDict};
//!
//! let big = nn::with_device(Device::Meta, || Linear::new(50_000, 50_000));
//! assert_eq!(big.num_parameters(), 50_000 * 50_000 + 50_000); // nothing allocated
//!
//! let mut lin = nn::with_device(Device::Meta, || Linear::new(2, 2));
//! assert_eq!(lin.weight.device(), Device::Meta);
//! lin.load_state_dict(&Linear::new(2, 2).state_dict(), true)?;
//! assert_eq!((lin.weight.device(), lin.weight.dtype()), (Device::Cpu, DType::F32));
//!
//! let mut bf16 = StateDict::new();
//! bf16.insert("weight".to_string(), Tensor::ones(&[2, 2]).to_dtype(DType::BF16));
//! bf16.insert("bias".to_string(), Tensor::zeros(&[2]).to_dtype(DType::BF16));
//! let mut kept = nn::with_device(Device::Meta, || Linear::new(2, 2));
//! kept.load_state_dict_with(&bf16, LoadStateDictConfig { strict: true, assign: true })?;
//! assert_eq!(kept.weight.dtype(), DType::BF16); // the file's dtype
//! # Ok::<(), nn::Error>(())
//! ```
//! nn-models' `from_pretrained` loads this way (see [the models chapter](super::models)):
//! the model is built on the meta device and takes the checkpoint's tensors, so a bf16
//! checkpoint is never held in `f32`. Extra state, state-dict versions and load hooks
//! that migrate old keys are in [Coming from PyTorch](crate::from_pytorch).
