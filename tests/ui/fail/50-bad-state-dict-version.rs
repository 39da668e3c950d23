// `#[module(version = ...)]` takes an unsuffixed integer from 1 (PyTorch's `_version`
// starts at 1): 0, a suffixed integer, a string, a bare `version`, a second `version` and a
// misspelt `version` are refused where they are written.

use nn_core::Module;

#[derive(Module)]
#[module(version = 0)]
struct Zero {}

#[derive(Module)]
#[module(version = 2u8)]
struct Suffixed {}

#[derive(Module)]
#[module(version = "2")]
struct Text {}

#[derive(Module)]
#[module(version)]
struct Bare {}

#[derive(Module)]
#[module(version = 1, version = 2)]
struct Twice {}

#[derive(Module)]
#[module(versoin = 2)]
struct Misspelt {}

fn main() {}
