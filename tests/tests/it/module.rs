//! `#[derive(Module)]` and the `Module` trait: names, order, state dicts, printout, modes,
//! dtype/device moves, freezing and counts, checked against what PyTorch gives for the
//! equivalent `nn.Module` (expected values written from PyTorch 2.x behaviour).

use nn_core::{Compute, Hooks, Layer};
use nn_core::{DType, Device, Forward, Module, ModuleBase, Parameter, StateDict, Tensor};
use nn_layers::{Linear, ModuleDict, ModuleList, ReLU, Sequential};

/// PyTorch:
/// ```python
/// class Block(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.fc = nn.Linear(4, 4)
///         self.register_buffer("scale", torch.ones(4))
///         self.register_buffer("cache", torch.zeros(2), persistent=False)
/// ```
#[derive(Module)]
struct Block {
    #[module]
    fc: Linear,
    #[buffer]
    scale: Tensor,
    #[buffer(persistent = false)]
    cache: Tensor,
    #[base]
    base: ModuleBase,
}

impl Block {
    fn new() -> Self {
        Block { fc: Linear::new(4, 4), scale: Tensor::ones(&[4]), cache: Tensor::zeros(&[2]), base: ModuleBase::new() }
    }
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let y = self.fc.forward(x) * &self.scale;
        if self.base.is_training() {
            y
        } else {
            y * 2.0
        }
    }
}

/// PyTorch:
/// ```python
/// class Net(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.embed = nn.Linear(3, 4)
///         self.blocks = nn.ModuleList([Block(), Block()])
///         self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1, bias=False)})
///         self.norm = None
///         self.gain = nn.Parameter(torch.ones(1))
///         self.register_parameter("extra", None)
///         self.hidden = 4
/// ```
#[derive(Module)]
struct Net {
    #[module]
    embed: Linear,
    #[module]
    blocks: ModuleList<Block>,
    #[module]
    heads: ModuleDict<Linear>,
    #[module]
    norm: Option<Linear>,
    #[param]
    gain: Parameter,
    #[param]
    extra: Option<Parameter>,
    hidden: usize,
}

fn net() -> Net {
    Net {
        embed: Linear::new(3, 4),
        blocks: ModuleList::from(vec![Block::new(), Block::new()]),
        heads: [("cls".to_string(), Linear::new(4, 2)), ("reg".to_string(), Linear::with_bias(4, 1, false))]
            .into_iter()
            .collect(),
        norm: None,
        gain: Parameter::new(Tensor::ones(&[1])),
        extra: None,
        hidden: 4,
    }
}

fn names<T>(v: Vec<(String, T)>) -> Vec<String> {
    v.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn parameter_names_and_order_match_pytorch() {
    let n = net();
    assert_eq!(n.hidden, 4);
    assert_eq!(
        names(n.named_parameters()),
        [
            "gain",
            "embed.weight",
            "embed.bias",
            "blocks.0.fc.weight",
            "blocks.0.fc.bias",
            "blocks.1.fc.weight",
            "blocks.1.fc.bias",
            "heads.cls.weight",
            "heads.cls.bias",
            "heads.reg.weight",
        ]
    );
    assert_eq!(n.parameters().len(), 10);
}

#[test]
fn buffers_and_state_dict_keys_match_pytorch() {
    let n = net();
    assert_eq!(names(n.named_buffers()), ["blocks.0.scale", "blocks.0.cache", "blocks.1.scale", "blocks.1.cache"]);
    let sd = n.state_dict();
    assert_eq!(
        sd.keys().collect::<Vec<_>>(),
        [
            "gain",
            "embed.weight",
            "embed.bias",
            "blocks.0.scale",
            "blocks.0.fc.weight",
            "blocks.0.fc.bias",
            "blocks.1.scale",
            "blocks.1.fc.weight",
            "blocks.1.fc.bias",
            "heads.cls.weight",
            "heads.cls.bias",
            "heads.reg.weight",
        ]
    );
    assert_eq!(sd.get("heads.reg.weight").unwrap().shape(), &[1, 4]);
}

#[test]
fn module_tree_matches_pytorch() {
    let n = net();
    let mods: Vec<(String, &str)> = n.named_modules().into_iter().map(|(p, m)| (p, m.type_name())).collect();
    let expect = [
        ("", "Net"),
        ("embed", "Linear"),
        ("blocks", "ModuleList"),
        ("blocks.0", "Block"),
        ("blocks.0.fc", "Linear"),
        ("blocks.1", "Block"),
        ("blocks.1.fc", "Linear"),
        ("heads", "ModuleDict"),
        ("heads.cls", "Linear"),
        ("heads.reg", "Linear"),
    ];
    assert_eq!(mods, expect.map(|(a, b)| (a.to_string(), b)));
    assert_eq!(names(n.named_children()), ["embed", "blocks", "heads"]);
    assert_eq!(n.get_submodule("blocks.1.fc").unwrap().type_name(), "Linear");
    assert_eq!(n.get_submodule("").unwrap().type_name(), "Net");
    let err = n.get_submodule("blocks.7.fc").err().unwrap().to_string();
    assert!(err.contains("no submodule `7`") && err.contains("`blocks`") && err.contains("[0, 1]"), "{err}");
}

#[test]
fn printout_matches_pytorch() {
    let expected = "\
Net(
  (embed): Linear(in_features=3, out_features=4, bias=True)
  (blocks): ModuleList(
    (0-1): 2 x Block(
      (fc): Linear(in_features=4, out_features=4, bias=True)
    )
  )
  (heads): ModuleDict(
    (cls): Linear(in_features=4, out_features=2, bias=True)
    (reg): Linear(in_features=4, out_features=1, bias=False)
  )
)";
    assert_eq!(net().to_string(), expected);
    let seq = Sequential::new().add(Linear::new(2, 3)).add(ReLU::new());
    assert_eq!(
        seq.to_string(),
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n)"
    );
}

/// transformers' class names are not Rust's (`GPT2LMHeadModel` for `Gpt2LMHeadModel`):
/// `#[module(name = "...")]` sets the name reported and printed; keys, look-ups and typed
/// access are unchanged.
#[test]
fn a_struct_name_option_sets_the_reported_and_printed_name() {
    #[derive(Module)]
    #[module(name = "GPT2Model")]
    struct Gpt2Model {
        #[module]
        wte: Linear,
    }
    #[derive(Module)]
    #[module(name = "GPT2LMHeadModel")]
    struct Gpt2LMHeadModel {
        #[module]
        transformer: Gpt2Model,
        #[module]
        lm_head: Linear,
    }
    let m = Gpt2LMHeadModel { transformer: Gpt2Model { wte: Linear::new(2, 3) }, lm_head: Linear::new(3, 2) };
    assert_eq!(m.type_name(), "GPT2LMHeadModel");
    assert_eq!(
        m.to_string(),
        "GPT2LMHeadModel(\n  (transformer): GPT2Model(\n    (wte): Linear(in_features=2, out_features=3, bias=True)\n  )\n  \
         (lm_head): Linear(in_features=3, out_features=2, bias=True)\n)"
    );
    let types: Vec<&str> = m.named_modules().into_iter().map(|(_, sub)| sub.type_name()).collect();
    assert_eq!(types, ["GPT2LMHeadModel", "GPT2Model", "Linear", "Linear"]);
    assert_eq!(m.state_dict().keys().next(), Some("transformer.wte.weight"));
    assert_eq!(m.get_submodule_as::<Gpt2Model>("transformer").unwrap().wte.out_features(), 3);
    let err = m.get_submodule("transformer.wpe").err().unwrap().to_string();
    assert!(err.starts_with("GPT2Model at `transformer` has no submodule `wpe`"), "{err}");
}

#[test]
fn modes_propagate_and_are_readable_in_forward() {
    let mut n = net();
    assert!(n.is_training());
    let x = Tensor::ones(&[1, 4]);
    let train_out = n.blocks[0].forward(&x).to_vec();
    n.eval();
    assert!(!n.is_training());
    for (_, m) in n.named_modules() {
        assert!(!m.is_training(), "{} still training", m.type_name());
    }
    let eval_out = n.blocks[0].forward(&x).to_vec();
    assert_eq!(eval_out, train_out.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    n.blocks[1].train();
    assert!(n.blocks[1].is_training() && !n.blocks[0].is_training());
    n.train();
    assert!(n.named_modules().iter().all(|(_, m)| m.is_training()));
}

#[test]
fn dtype_moves_keep_handles_and_convert_floats_only() {
    let mut n = net();
    let held = n.parameters(); // what an optimizer would hold
    n.to_dtype(DType::F64);
    assert!(held.iter().all(|p| p.dtype() == DType::F64));
    assert!(n.buffers().iter().all(|b| b.dtype() == DType::F64));
    let mut with_int = IntBuffer { count: Tensor::from_vec_i64(vec![3], &[]), w: Parameter::new(Tensor::ones(&[2])) };
    with_int.to_dtype(DType::F16);
    assert_eq!(with_int.count.dtype(), DType::I64, "integer buffers keep their dtype, as in PyTorch");
    assert_eq!(with_int.w.dtype(), DType::F16);
}

#[derive(Module)]
struct IntBuffer {
    #[buffer]
    count: Tensor,
    #[param]
    w: Parameter,
}

#[test]
fn freezing_and_counts() {
    let n = net();
    let total = 1 + (3 * 4 + 4) + 2 * (4 * 4 + 4) + (4 * 2 + 2) + 4;
    assert_eq!(n.num_parameters(), total);
    assert_eq!(n.num_trainable_parameters(), total);
    n.blocks.requires_grad_(false);
    assert_eq!(n.num_trainable_parameters(), total - 2 * (4 * 4 + 4));
    let frozen = n.blocks[0].fc.weight.clone();
    assert!(!frozen.requires_grad());
    // Gradients only reach trainable parameters.
    let y = n.blocks[0].forward(&n.embed.forward(&Tensor::ones(&[2, 3]))).sum();
    y.backward();
    assert!(frozen.grad().is_none());
    assert!(n.embed.weight.grad().is_some());
    n.zero_grad();
    assert!(n.embed.weight.grad().is_none());
}

#[test]
fn meta_model_gives_schema_without_memory_and_materialises() {
    let mut n = net();
    n.to_device(Device::Meta);
    let sd = n.state_dict();
    assert!(sd.values().all(|t| t.device() == Device::Meta));
    assert_eq!(sd.get("embed.weight").unwrap().shape(), &[4, 3]);
    assert_eq!(n.num_parameters(), net().num_parameters());
    // Load real values into the meta model (assign): no random init is computed.
    let real = net();
    n.load_state_dict(&real.state_dict(), true).unwrap();
    assert_eq!(n.embed.weight.device(), Device::Cpu);
    assert_eq!(n.embed.weight.to_vec(), real.embed.weight.to_vec());
}

#[test]
fn a_prefix_on_every_key_is_one_line_and_strip_prefix_loads_it() {
    let mut n = net();
    let sd = net().state_dict().add_prefix("_orig_mod.");
    let err = n.load_state_dict(&sd, true).unwrap_err().to_string();
    let keys = sd.len().to_string();
    assert!(
        err.contains("every key of the state dict starts with `_orig_mod.`")
            && err.contains("`state_dict.strip_prefix(\"_orig_mod.\")?`")
            && err.contains(&format!("missing key(s): {keys}")),
        "{err}"
    );
    assert!(!err.contains("did you mean"), "no guess per key beside the summary: {err}");
    assert_eq!(err.lines().count(), 4, "{err}");
    n.load_state_dict(&sd.strip_prefix("_orig_mod.").unwrap(), true).unwrap();
    // The other way round: the module is the wrapped one.
    let bare = net().state_dict();
    let e = nn_core::error::StateDictError {
        missing_keys: bare.keys().map(|k| (format!("model.{k}"), None)).collect(),
        unexpected_keys: bare.keys().map(str::to_string).collect(),
        mismatched: vec![],
        tied_conflicts: vec![],
        module: "Wrapper".into(),
    };
    assert!(e.to_string().contains("load `state_dict.add_prefix(\"model.\")`"), "{e}");
}

#[test]
fn key_lists_are_separated_without_a_trailing_comma() {
    let mut n = net();
    let mut sd: StateDict = net().state_dict();
    sd.remove("gain");
    sd.insert("extra".into(), Tensor::zeros(&[1]));
    let err = n.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(err.contains("missing key(s): \"gain\"\n"), "{err}");
    assert!(err.contains("unexpected key(s): \"extra\"") && !err.contains("\"extra\","), "{err}");
}

#[test]
fn load_state_dict_reports_everything_and_leaves_model_unchanged() {
    let mut n = net();
    let before = n.state_dict().iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect::<Vec<_>>();
    let mut sd: StateDict = net().state_dict();
    sd.remove("gain");
    let w = sd.remove("embed.weight").unwrap();
    sd.insert("embed.wieght".into(), w);
    sd.insert("heads.cls.bias".into(), Tensor::zeros(&[3]));
    let err = n.load_state_dict(&sd, true).unwrap_err().to_string();
    for needle in [
        "\"gain\"",
        "\"embed.weight\" (did you mean \"embed.wieght\"?)",
        "\"embed.wieght\"",
        "heads.cls.bias",
        "[3]",
        "[2]",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
    let after = n.state_dict().iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect::<Vec<_>>();
    assert_eq!(before, after, "a failed load must not change the model");
    // Non-strict: missing/unexpected are reported, shapes still fatal.
    sd.insert("heads.cls.bias".into(), Tensor::zeros(&[2]));
    let r = n.load_state_dict(&sd, false).unwrap();
    assert_eq!(r.missing_keys, ["gain", "embed.weight"]);
    assert_eq!(r.unexpected_keys, ["embed.wieght"]);
    assert_eq!(n.heads["cls"].bias.as_ref().unwrap().to_vec(), vec![0.0, 0.0]);
}

/// A value that overflows the module's dtype on load is a mismatch naming the key (not
/// loaded as inf, as PyTorch's `copy_` does); infinities and NaN in the file load as they are.
#[test]
fn a_value_that_overflows_the_modules_dtype_is_refused() {
    let mut lin = Linear::new(2, 1);
    lin.to_dtype(DType::F16);
    let before = lin.weight.to_vec();
    let mut sd = StateDict::default();
    sd.insert("weight".into(), Tensor::from_vec(vec![1.0, 70000.0], &[1, 2]));
    sd.insert("bias".into(), Tensor::from_vec(vec![0.5], &[1]));
    let err = lin.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(
        err.contains("finite values overflow the module's dtype (they would load as inf): \"weight\" is [1, 2] f32"),
        "{err}"
    );
    assert_eq!(lin.weight.to_vec(), before, "nothing loaded");
    let mut sd64 = StateDict::default();
    sd64.insert("weight".into(), Tensor::from_vec_f64(vec![1e300, 0.0], &[1, 2]));
    sd64.insert("bias".into(), Tensor::from_vec_f64(vec![0.5], &[1]));
    let mut lin32 = Linear::new(2, 1);
    assert!(lin32.load_state_dict(&sd64, true).unwrap_err().to_string().contains("\"weight\" is [1, 2] f64"));
    sd.insert("weight".into(), Tensor::from_vec(vec![f32::INFINITY, f32::NAN], &[1, 2]));
    lin.load_state_dict(&sd, true).unwrap();
    let w = lin.weight.to_vec();
    assert!(w[0] == f32::INFINITY && w[1].is_nan());
}

#[test]
fn generic_and_tuple_structs() {
    #[derive(Module)]
    struct Residual<M: Layer> {
        #[module]
        inner: M,
        #[base]
        base: ModuleBase,
    }
    impl<M: Layer> Compute for Residual<M> {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            x + &self.inner.forward(x)
        }
    }
    #[derive(Module)]
    struct Pair(#[module] Linear, #[module(rename = "proj")] Linear, usize);
    let r = Residual { inner: Linear::new(2, 2), base: ModuleBase::new() };
    assert_eq!(names(r.named_parameters()), ["inner.weight", "inner.bias"]);
    assert_eq!(r.forward(&Tensor::ones(&[1, 2])).shape(), &[1, 2]);
    let p = Pair(Linear::new(1, 1), Linear::new(1, 1), 0);
    assert_eq!(names(p.named_parameters()), ["0.weight", "0.bias", "proj.weight", "proj.bias"]);
    assert_eq!(p.2, 0);
}

#[test]
fn apply_reaches_every_module_for_custom_init() {
    let mut n = net();
    let mut count = 0;
    n.apply(&mut |m| {
        if let Some(lin) = m.as_any().downcast_ref::<Linear>() {
            nn_core::no_grad(|| lin.weight.fill_(0.5));
            count += 1;
        }
    });
    assert_eq!(count, 5);
    assert!(n.heads["reg"].weight.to_vec().iter().all(|&v| v == 0.5));
}

#[test]
fn weight_tying_is_listed_once_but_saved_under_both_names() {
    #[derive(Module)]
    struct Tied {
        #[param]
        a: Parameter,
        #[param]
        b: Parameter,
    }
    let p = Parameter::new(Tensor::ones(&[2]));
    let t = Tied { a: p.clone(), b: p };
    assert_eq!(names(t.named_parameters()), ["a"]);
    assert_eq!(t.num_parameters(), 2);
    assert_eq!(t.state_dict().keys().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn building_on_meta_allocates_nothing_and_loads_real_weights() {
    use nn_layers::{BatchNorm1d, Embedding};
    // 100,000 x 100,000 weights would need 40 GB; on meta they need nothing.
    let huge = nn_core::with_device(Device::Meta, || {
        Sequential::new()
            .add(Embedding::with_padding_idx(100_000, 100_000, 0))
            .add(Linear::new(100_000, 100_000))
            .add(BatchNorm1d::new(100_000))
    });
    assert_eq!(huge.num_parameters(), 2 * 100_000 * 100_000 + 100_000 + 2 * 100_000);
    let sd = huge.state_dict();
    assert_eq!(sd.get("1.weight").unwrap().shape(), &[100_000, 100_000]);
    assert!(sd.get("1.weight").unwrap().device() == Device::Meta);
    assert_eq!(Tensor::zeros(&[1]).device(), Device::Cpu, "the default device is restored");
    // A small meta model materialises by loading real weights (no init is computed).
    let real = net();
    let mut meta = nn_core::with_device(Device::Meta, net);
    assert!(meta.embed.weight.device() == Device::Meta);
    meta.load_state_dict(&real.state_dict(), true).unwrap();
    assert_eq!(meta.embed.weight.to_vec(), real.embed.weight.to_vec());
    assert_eq!(meta.forward_check(), real.forward_check());
}

impl Net {
    fn forward_check(&self) -> Vec<f32> {
        self.blocks[0].forward(&self.embed.forward(&Tensor::ones(&[1, 3]))).to_vec()
    }
}

#[test]
fn mutable_tree_by_path_and_freezing_a_subtree() {
    let mut n = net();
    assert_eq!(n.modules().len(), n.named_modules().len());
    assert_eq!(n.modules()[0].type_name(), "Net");
    // `requires_grad_` on any subtree, through a shared reference.
    n.get_submodule("blocks.1").unwrap().requires_grad_(false);
    let frozen: Vec<String> =
        n.named_parameters().into_iter().filter(|(_, p)| !p.requires_grad()).map(|(k, _)| k).collect();
    assert_eq!(frozen, ["blocks.1.fc.weight", "blocks.1.fc.bias"]);
    // Mutable access by path: switch one block to eval mode only.
    n.get_submodule_mut("blocks.0").unwrap().eval();
    assert!(!n.blocks[0].base.is_training() && n.blocks[1].base.is_training());
    let e = n.get_submodule_mut("blocks.2.fc").err().unwrap().to_string();
    assert!(e.contains("no submodule `2`") && e.contains("children are: [0, 1]"), "{e}");
}

#[test]
fn typed_access_without_downcasts() {
    let mut n = net();
    let cls: &Linear = n.get_submodule_as("heads.cls").unwrap();
    assert_eq!((cls.in_features(), cls.out_features()), (4, 2));
    n.get_submodule_as_mut::<Linear>("embed").unwrap().bias = None;
    assert!(n.embed.bias.is_none());
    let e = n.get_submodule_as::<ReLU>("heads.cls").err().unwrap();
    assert!(matches!(e, nn_core::Error::WrongModuleType { expected: "ReLU", found: "Linear", .. }), "{e}");
    assert_eq!(e.to_string(), "the module at `heads.cls` is a `Linear`, not a `ReLU`");
    let seq = Sequential::new().add(Linear::new(2, 3)).add(ReLU::new());
    assert_eq!(seq.get::<Linear>(0).unwrap().out_features(), 3);
    assert!(seq.get::<Linear>(1).is_none() && seq.get::<ReLU>(1).is_some());
}

#[test]
fn set_submodule_replaces_fitting_modules_and_refuses_the_rest() {
    let mut n = net();
    // A typed slot takes its own type.
    n.set_submodule("embed", Linear::new(3, 4)).unwrap();
    // An `Option` slot takes the module (and registers it).
    n.set_submodule("norm", Linear::new(4, 4)).unwrap();
    assert!(n.named_parameters().iter().any(|(k, _)| k == "norm.weight"));
    // Container items: a list item, a dictionary entry.
    let new_head = Linear::with_bias(4, 2, false);
    let id = new_head.weight.id();
    n.set_submodule("heads.cls", new_head).unwrap();
    assert_eq!(n.heads["cls"].weight.id(), id);
    n.set_submodule("blocks.1", Block::new()).unwrap();

    // Wrong type, unknown path, a list index out of range: errors, nothing changed.
    let before = n.state_dict();
    let e = n.set_submodule("embed", ReLU::new()).unwrap_err().to_string();
    assert_eq!(e, "cannot set `embed`: the slot holds `Linear`, got `ReLU`");
    let e = n.set_submodule("blocks.0", Linear::new(4, 4)).unwrap_err().to_string();
    assert!(e.contains("the slot holds `Block`, got `Linear`"), "{e}");
    let e = n.set_submodule("blocks.7", Block::new()).unwrap_err().to_string();
    assert!(e.contains("no submodule `7`"), "{e}");
    let e = n.set_submodule("nope.fc", Linear::new(4, 4)).unwrap_err().to_string();
    assert!(e.contains("no submodule `nope`"), "{e}");
    let after = n.state_dict();
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (k, t) in before.iter() {
        assert_eq!(after.get(k).unwrap().to_vec(), t.to_vec(), "{k} changed");
    }

    // `Sequential` items and `Box<dyn Layer>` slots take a boxed layer of any type.
    let mut seq = Sequential::new().add(Linear::new(2, 2)).add_named("act", ReLU::new());
    seq.set_submodule("act", Box::new(nn_layers::Tanh::new()) as Box<dyn Layer>).unwrap();
    assert_eq!(seq[1].type_name(), "Tanh");
    let e = seq.set_submodule("0", nn_layers::Tanh::new()).unwrap_err().to_string();
    assert!(e.contains("the slot holds `Box<dyn Layer>`, got `Tanh`") && e.contains("box the module first"), "{e}");
    assert_eq!(seq.forward(&Tensor::full(&[1, 2], 10.0)).shape(), &[1, 2]);
}

#[test]
fn hooks_on_containers_and_scoped_hooks() {
    let n = net();
    // A `ModuleList` has no forward of its own: a hook on it could never fire.
    let e = n.as_dyn().register_forward_hook_at("blocks", |_, _| None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`ModuleList` (at `blocks`) has no forward of its own, so a hook on it would never fire: register hooks on \
         the modules it holds"
    );
    assert!(!n.blocks.runs_forward() && n.blocks[0].runs_forward());
    // A scoped hook is removed at the end of its scope; a plain handle stays.
    let b = &n.blocks[0];
    let x = Tensor::ones(&[1, 4]);
    let plain = b.register_forward_hook(|_, y| Some(y * 0.0)).unwrap();
    {
        let _guard = b.register_forward_hook(|_, y| Some(y + 1.0)).unwrap().scoped();
        assert_eq!(b.forward(&x).to_vec(), [1.0; 4]);
    }
    assert_eq!(b.forward(&x).to_vec(), [0.0; 4]);
    assert!(plain.is_registered());
    plain.remove();
    assert_ne!(b.forward(&x).to_vec(), [0.0; 4]);
}

/// A checkpoint key that differs from the module's only by a Rust keyword (`self`, `type`)
/// gets a load error naming the `rename` attribute to write, on the field it names.
#[test]
fn a_load_error_for_a_keyword_key_names_the_rename_attribute() {
    #[derive(Module)]
    struct SelfAttention {
        #[module]
        query: nn_layers::Linear,
    }
    #[derive(Module)]
    struct Attention {
        #[module]
        self_attn: SelfAttention,
        #[param]
        kind: Parameter,
    }
    let mut m = Attention {
        self_attn: SelfAttention { query: nn_layers::Linear::new(2, 2) },
        kind: Parameter::new(Tensor::zeros(&[2])),
    };
    let mut sd = StateDict::default();
    sd.insert("self.query.weight".into(), Tensor::zeros(&[2, 2]));
    sd.insert("self.query.bias".into(), Tensor::zeros(&[2]));
    sd.insert("type".into(), Tensor::zeros(&[2]));
    let err = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(
        err.contains(
            "\"self_attn.query.weight\" (did you mean \"self.query.weight\"? `self` is a Rust keyword: keep the field \
             `self_attn` and write `#[module(rename = \"self\")]` on it"
        ),
        "{err}"
    );
    assert!(err.contains("\"kind\" (did you mean \"type\"? `type` is a Rust keyword: keep the field `kind` and write `#[param(rename = \"type\")]`"), "{err}");
    // An ordinary typo gets the plain guess, no attribute.
    let mut sd = StateDict::default();
    sd.insert("self_atn.query.weight".into(), Tensor::zeros(&[2, 2]));
    let err = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(err.contains("(did you mean \"self_atn.query.weight\"?)") && !err.contains("rename"), "{err}");
}

/// `forward` takes owned inputs and tuples of owned tensors, as well as references.
#[test]
fn forward_takes_owned_tuples() {
    let bl = nn_layers::Bilinear::new(3, 4, 2);
    let (x1, x2) = (Tensor::randn(&[5, 3]), Tensor::randn(&[5, 4]));
    let by_ref = bl.forward((&x1, &x2)).to_vec();
    assert_eq!(bl.forward((x1.clone(), x2.clone())).to_vec(), by_ref);
    let lin = nn_layers::Linear::new(3, 2);
    assert_eq!(lin.forward(x1.clone()).to_vec(), lin.forward(&x1).to_vec());
}

/// A positional name already taken by `add_named` is refused: both layers would have one
/// state-dict key, and the first one's weights would never be saved.
#[test]
#[should_panic(
    expected = "the layer at position 1 would be named \"1\", which a layer added with add_named already is"
)]
fn sequential_refuses_a_position_named_by_add_named() {
    let _ = nn_layers::Sequential::new().add_named("1", nn_layers::Linear::new(4, 4)).add(nn_layers::Linear::new(4, 4));
}

/// Freezing a lazy layer before its first forward is refused: its parameters do not
/// exist yet, and would be made later with `requires_grad` true.
#[test]
#[should_panic(
    expected = "requires_grad_(false): the lazy module `0` (LazyLinear) has no parameters until its first forward"
)]
fn freezing_a_lazy_layer_before_its_first_forward_is_refused() {
    Sequential::new().add(nn_layers::LazyLinear::new(2)).requires_grad_(false);
}

/// `to_device` moves the gradients with the parameters, as PyTorch's `Module.to`: one left
/// behind could be neither accumulated into nor replaced in another dtype.
#[test]
fn to_device_moves_the_gradients() {
    let mut l = Linear::new(2, 2);
    l.forward(&Tensor::ones(&[1, 2])).sum().backward();
    l.to_dtype(DType::F64);
    l.to_device(Device::Meta);
    assert!(l.parameters().iter().all(|p| p.grad().unwrap().device() == Device::Meta));
    assert!(l.parameters().iter().all(|p| p.grad().unwrap().dtype() == DType::F64));
}

/// Listing the parameters of a model with a lazy layer that has not run yet is refused: an
/// optimizer built from that list held none of the lazy layer's parameters, and the layer
/// never trained. After one forward the list is complete.
#[test]
fn listing_parameters_before_a_lazy_layers_first_forward_is_refused() {
    let model = Sequential::new().add(Linear::new(3, 4)).add(nn_layers::LazyLinear::new(2));
    for (op, list) in [
        ("named_parameters", Box::new(|| drop(model.named_parameters())) as Box<dyn Fn()>),
        ("parameters", Box::new(|| drop(model.parameters()))),
        (
            "parameters",
            Box::new(|| {
                let _ = model.num_parameters();
            }),
        ),
    ] {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(list)).expect_err("refused");
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.starts_with(&format!(
                "{op}: the lazy module `1` (LazyLinear) has no parameters until its first forward"
            )) && msg.contains("run one forward pass first"),
            "{msg}"
        );
    }
    model.zero_grad(); // nothing to clear, nothing refused
    model.forward(&Tensor::ones(&[1, 3]));
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
    assert_eq!(model.num_parameters(), 3 * 4 + 4 + 4 * 2 + 2);
}

/// Converting or moving a model with a lazy layer that has not run yet is refused, and
/// nothing converts or moves: the lazy layer's parameters would be made in f32 on the CPU
/// at its first forward, after the rest moved (a model of lazy layers alone would convert
/// nothing and run in f32 without a word). After one forward both work.
#[test]
fn converting_or_moving_before_a_lazy_layers_first_forward_is_refused() {
    let mut model = Sequential::new().add(Linear::new(3, 4)).add(nn_layers::LazyLinear::new(2));
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.to_dtype(DType::F64))).unwrap_err();
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.starts_with("to_dtype(f64): the lazy module `1` (LazyLinear) has no parameters until its first forward")
            && msg.contains("made in f32 when it runs, not in f64"),
        "{msg}"
    );
    let e = model.try_to_device(Device::Meta).unwrap_err().to_string();
    assert!(e.contains("`LazyLinear` has uninitialized parameters"), "{e}");
    model.forward(&Tensor::ones(&[1, 3]));
    assert!(model.state_dict().iter().all(|(_, t)| t.dtype() == DType::F32 && t.device() == Device::Cpu));
    model.to_dtype(DType::F64);
    model.to_device(Device::Meta);
    assert!(model.state_dict().iter().all(|(_, t)| t.dtype() == DType::F64 && t.device() == Device::Meta));
}

/// A model built on the meta device that did not load every value (a non-strict load
/// with the head missing) is refused, as PyTorch refuses, rather than moved as zeros
/// without a word. Nothing moves; `to_empty` makes zero-filled storage on purpose.
#[test]
fn moving_meta_tensors_to_a_real_device_is_refused() {
    let mut m = nn_core::with_device(Device::Meta, || Sequential::new().add(Linear::new(4, 3)).add(Linear::new(3, 2)));
    let backbone = Sequential::new().add(Linear::new(4, 3));
    let report = m.load_state_dict(&backbone.state_dict(), false).unwrap();
    assert_eq!(report.missing_keys, ["1.weight", "1.bias"]);
    let e = m.try_to_device(Device::Cpu).unwrap_err().to_string();
    assert!(e.starts_with("to_device(cpu): `1.weight` is on the meta device and has no values to move"), "{e}");
    let devices = |m: &Sequential| m.state_dict().iter().map(|(_, t)| t.device()).collect::<Vec<_>>();
    assert_eq!(devices(&m), [Device::Cpu, Device::Cpu, Device::Meta, Device::Meta]);
    m.to_empty(Device::Cpu).unwrap();
    assert_eq!(devices(&m), [Device::Cpu; 4]);
    assert!(m.state_dict().iter().all(|(_, t)| t.to_vec().iter().all(|v| *v == 0.0)));
}

/// A boxed module keeps the behaviour its type overrides: a boxed lazy layer listed no
/// parameters (an optimizer built from the empty list trained nothing) where the layer
/// itself refuses.
#[test]
fn a_boxed_lazy_layer_refuses_like_the_layer() {
    let boxed: Box<dyn nn_core::Layer> = Box::new(nn_layers::LazyLinear::new(2));
    assert!(boxed.is_uninitialized());
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(boxed.parameters()))).unwrap_err();
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.starts_with("parameters: the lazy module (LazyLinear) has no parameters"), "{msg}");
    let mut boxed = boxed;
    assert!(boxed.try_to_device(Device::Meta).is_err());
}

/// `load_state_dict` copies into each entry's storage, as PyTorch's `param.copy_`: views,
/// detached handles and an earlier `state_dict()`'s tensors see the loaded values (a new
/// storage would leave them with the old ones), and the model does not alias the source.
#[test]
fn a_load_writes_in_place_so_aliases_see_the_loaded_values() {
    let mut l = Linear::new(3, 2);
    let held = l.state_dict();
    let view = l.weight.detach().t();
    let other = Linear::new(3, 2);
    l.load_state_dict(&other.state_dict(), true).unwrap();
    assert_eq!(held.get("weight").unwrap().to_vec(), other.weight.to_vec());
    assert_eq!(view.t().contiguous().to_vec(), other.weight.to_vec());
    assert_eq!(l.weight.to_vec(), other.weight.to_vec());
    nn_core::no_grad(|| other.weight.fill_(7.0));
    assert!(l.weight.to_vec().iter().all(|v| *v != 7.0));
}

/// Loading into a model whose lazy layer has not run: its entries would be dropped as
/// unexpected (non-strict: the trained weights silently lost, the first forward drawing
/// new ones). Refused, naming the layer.
#[test]
fn loading_before_a_lazy_layers_first_forward_is_refused() {
    let mut m = Sequential::new().add(nn_layers::LazyLinear::new(2));
    let trained = Sequential::new().add(Linear::new(3, 2));
    for strict in [false, true] {
        let e = m.load_state_dict(&trained.state_dict(), strict).unwrap_err().to_string();
        assert!(e.contains("`LazyLinear` has uninitialized parameters"), "{e}");
    }
    m.forward(&Tensor::ones(&[1, 3]));
    m.load_state_dict(&trained.state_dict(), true).unwrap();
    assert_eq!(
        m.state_dict().get("0.weight").unwrap().to_vec(),
        trained.state_dict().get("0.weight").unwrap().to_vec()
    );
    // A state dict with nothing for the lazy layer (a backbone under a new lazy head) loads.
    let mut headed = Sequential::new().add(Linear::new(3, 2)).add(nn_layers::LazyLinear::new(5));
    headed.load_state_dict(&trained.state_dict(), false).unwrap();
    let w = headed.get_submodule_as::<Linear>("0").unwrap().weight.to_vec();
    assert_eq!(w, trained.state_dict().get("0.weight").unwrap().to_vec());
}

/// A buffer shared by two modules is listed once, as PyTorch's `named_buffers`: an
/// in-place update over the list applied twice.
#[test]
fn a_shared_buffer_is_listed_once() {
    #[derive(Module)]
    struct Shared {
        #[buffer]
        a: Tensor,
        #[buffer]
        b: Tensor,
    }
    let t = Tensor::zeros(&[2]);
    let m = Shared { a: t.clone(), b: t };
    let names: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["a"]);
    for b in m.buffers() {
        b.add_(1.0);
    }
    assert_eq!(m.b.to_vec(), [1.0, 1.0]);
    assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["a", "b"]); // the state dict keeps both names
}

/// A hand-written `visit` naming two tensors alike: the state dict kept only the last.
#[test]
#[should_panic(expected = "state_dict: two different tensors are named `w`")]
fn two_tensors_under_one_name_are_refused() {
    use nn_core::module::HoldsState;
    use nn_core::{Item, Name};
    struct Twice {
        a: Parameter,
        b: Parameter,
        base: ModuleBase,
    }
    impl HoldsState for Twice {}
    impl Module for Twice {
        fn runs_forward(&self) -> bool {
            false
        }
        fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
            f(Name::Field("w"), Item::Param(&self.a));
            f(Name::Field("w"), Item::Param(&self.b));
        }
        fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
        fn type_name(&self) -> &'static str {
            "Twice"
        }
        nn_core::module_accessors!(base);
    }
    let m = Twice {
        a: Parameter::new(Tensor::ones(&[1])),
        b: Parameter::new(Tensor::zeros(&[1])),
        base: ModuleBase::new(),
    };
    m.state_dict();
}

/// `to_dtype`/`to_device` visit every tensor, a buffer an op computed (a non-leaf) too,
/// without reading its `grad()` (which refuses non-leaves).
#[test]
fn a_buffer_computed_by_an_op_converts_with_its_module() {
    #[derive(Module)]
    struct Scaled {
        #[param]
        w: Parameter,
        #[buffer]
        s: Tensor,
    }
    let w = Parameter::new(Tensor::ones(&[2]));
    let mut m = Scaled { s: &*w * 2.0, w };
    assert!(!m.s.is_leaf());
    m.to_dtype(DType::F64);
    m.to_device(Device::Meta);
    assert_eq!((m.s.dtype(), m.s.device()), (DType::F64, Device::Meta));
}

/// `ModuleList::{insert, extend, pop, remove}` and `ModuleDict::remove` renumber and keep
/// order as PyTorch's do: keys follow the list's positions after each edit.
#[test]
fn container_edits_renumber_keys_as_pytorch() {
    let keys = |l: &ModuleList<Linear>| l.state_dict().keys().map(String::from).collect::<Vec<_>>();
    let mut l: ModuleList<Linear> = (1..=2).map(|i| Linear::new(i, 1)).collect();
    l.insert(0, Linear::new(5, 1));
    assert_eq!(l[0].in_features(), 5);
    assert_eq!(keys(&l)[..2], ["0.weight", "0.bias"]);
    l.extend([Linear::new(7, 1)]);
    assert_eq!(l.remove(1).in_features(), 1);
    assert_eq!(l.iter().map(|m| m.in_features()).collect::<Vec<_>>(), [5, 2, 7]);
    assert_eq!(l.pop().map(|m| m.in_features()), Some(7));
    assert_eq!(keys(&l), ["0.weight", "0.bias", "1.weight", "1.bias"]);
    let mut d: ModuleDict<Linear> = ["a", "b", "c"].iter().map(|k| (k.to_string(), Linear::new(2, 2))).collect();
    assert!(d.remove("b").is_some() && d.remove("b").is_none());
    assert_eq!(d.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(d.get("c").map(|m| m.in_features()), Some(2));
    assert!(d.contains_key("a") && !d.contains_key("b"));
}

#[test]
#[should_panic(expected = "ModuleList::remove: index 2 out of range for 2 modules")]
fn removing_past_the_end_names_the_index() {
    let mut l: ModuleList<Linear> = (0..2).map(|_| Linear::new(1, 1)).collect();
    l.remove(2);
}

/// `zero_grad_with(false)` fills existing gradients with zeros in place (PyTorch's
/// `zero_grad(set_to_none=False)`); `named_modules_with` puts a prefix before every path.
#[test]
fn zero_filling_zero_grad_and_prefixed_module_names() {
    use nn_core::module::ModuleExt;
    let lin = Linear::new(2, 1);
    lin.forward(&Tensor::ones(&[1, 2])).sum().backward();
    lin.zero_grad_with(false);
    assert_eq!(lin.weight.grad().map(|g| g.to_vec()), Some(vec![0.0, 0.0]));
    lin.zero_grad_with(true);
    assert!(lin.weight.grad().is_none());
    let seq = Sequential::new().add(Linear::new(2, 2)).add(ReLU::new());
    let names: Vec<String> = seq.named_modules_with("model").into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["model", "model.0", "model.1"]);
    let e = seq.get_buffer("0.weight").unwrap_err().to_string();
    assert!(e.contains("Linear at `0` has no buffer `weight`"), "{e}");
}

/// BatchNorm's layout is version 2, as PyTorch's: an older state dict without
/// `num_batches_tracked` loads (PyTorch's `_NormBase._load_from_state_dict`), and one that
/// records version 2 and lacks it is refused as any missing key.
#[test]
fn batch_norm_migrates_a_state_dict_from_before_num_batches_tracked() {
    use nn_core::StateDict;
    let mut bn = nn_layers::BatchNorm1d::new(3);
    let sd = bn.state_dict();
    assert_eq!(sd.version(""), Some(2), "the layout version is recorded");
    // A version-1 file: no num_batches_tracked, no version recorded.
    let mut old = StateDict::new();
    for (k, t) in sd.iter() {
        if k != "num_batches_tracked" {
            old.insert(k.to_string(), (t * 1.0).detach());
        }
    }
    old.get("running_mean").unwrap().fill_(0.5);
    bn.load_state_dict(&old, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bn.running_mean.as_ref().unwrap().to_vec(), [0.5; 3]);
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().to_vec_i64(), [0], "the layer's own count");
    // Nested, under its prefix, in a deep copy too (the migration is the type's).
    let mut seq = nn_layers::Sequential::new().add(nn_layers::BatchNorm1d::new(3)).deep_copy();
    let nested: StateDict = old.iter().map(|(k, t)| (format!("0.{k}"), t.clone())).collect();
    seq.load_state_dict(&nested, true).unwrap_or_else(|e| panic!("{e}"));
    // Recorded as version 2 and still missing it: a missing key.
    let mut v2 = old.clone();
    v2.set_version("", 2);
    let err = bn.load_state_dict(&v2, true).unwrap_err().to_string();
    assert!(err.contains("num_batches_tracked"), "{err}");
}
