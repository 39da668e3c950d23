//! `Module::deep_copy` (PyTorch's `copy.deepcopy(model)`): an independent copy, with ties
//! inside the model kept, the training flag kept, and neither gradients nor hooks copied.
//! Training the copy leaves the original bit for bit.

use nn_core::module::{CopySlot, DeepCopier, HoldsState};
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::prelude::*;
use nn_core::{no_grad, DType, Item, Name, Parameter, StateDict};
use nn_layers::{BatchNorm1d, Embedding, LazyLinear, Linear, ModuleDict, ModuleList, ReLU, Sequential, Tanh, LSTM};

/// A model with one of each kind of state: a tie (GPT-2's head on its embedding),
/// buffers (batch norm's running statistics and counter), containers of every kind, a
/// recurrent layer, a lazy layer, an optional sub-module and plain data.
#[derive(Module)]
struct Zoo {
    #[module]
    wte: Embedding,
    #[module]
    body: Sequential,
    #[module]
    norm: BatchNorm1d,
    #[module]
    blocks: ModuleList<Linear>,
    #[module]
    heads: ModuleDict<Linear>,
    #[module]
    rnn: LSTM,
    #[module]
    lazy: LazyLinear,
    #[module]
    extra: Option<Linear>,
    #[module]
    lm_head: Linear,
    #[param]
    scale: Parameter,
    #[buffer]
    steps: Tensor,
    label: String,
    #[base]
    base: ModuleBase,
}

impl Zoo {
    fn new() -> Self {
        nn_core::manual_seed(7);
        let wte = Embedding::new(9, 6);
        let mut lm_head = Linear::with_bias(6, 9, false);
        lm_head.weight = wte.weight.clone();
        Zoo {
            wte,
            body: Sequential::new().add(Linear::new(6, 6)).add(Tanh::new()).add(Linear::new(6, 6)),
            norm: BatchNorm1d::new(6),
            blocks: ModuleList::from(vec![Linear::new(6, 6), Linear::new(6, 6)]),
            heads: [("a".to_string(), Linear::new(6, 6))].into_iter().collect(),
            rnn: LSTM::new(6, 6),
            lazy: LazyLinear::new(6),
            extra: Some(Linear::new(6, 6)),
            lm_head,
            scale: Parameter::new(Tensor::ones(&[6])),
            steps: Tensor::zeros(&[1]),
            label: "zoo".into(),
            base: ModuleBase::new(),
        }
    }

    fn tied(&self) -> bool {
        self.wte.weight.id() == self.lm_head.weight.id()
    }
}

impl Compute for Zoo {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, ids: &Tensor) -> Tensor {
        let h = self.wte.forward(ids); // [2, 3, 6]
        let h = self.body.forward(&h);
        let h = self.norm.forward(&h.reshape(&[6, 6])).reshape(&[2, 3, 6]);
        let h = self.blocks[1].forward(&self.blocks[0].forward(&h));
        let h = self.heads["a"].forward(&h);
        let (h, _) = self.rnn.forward(&h);
        let h = self.lazy.forward(&h);
        let h = self.extra.as_ref().unwrap().forward(&h) * &*self.scale;
        self.steps.add_(1.0);
        self.lm_head.forward(&h)
    }
}

fn ids() -> Tensor {
    Tensor::from_vec_i64(vec![0, 3, 8, 2, 2, 5], &[2, 3])
}

/// Every entry of the state dict, bit for bit.
fn bits(sd: &StateDict) -> Vec<(String, Vec<u64>)> {
    sd.iter().map(|(k, t)| (k.to_string(), t.to_vec_f64().iter().map(|v| v.to_bits()).collect())).collect()
}

#[test]
fn training_the_copy_leaves_the_original_bit_for_bit() {
    let online = Zoo::new();
    online.forward(&ids()); // materialises the lazy layer
    let before = bits(&online.state_dict());
    let target = online.deep_copy();
    assert_eq!(bits(&target.state_dict()), before, "equal values");
    // New identities everywhere: no parameter or buffer is shared with the original.
    let originals: Vec<_> = online.parameters().iter().map(|p| p.id()).collect();
    assert!(target.parameters().iter().all(|p| !originals.contains(&p.id())));
    let buffers: Vec<_> = online.buffers().iter().map(|t| t.id()).collect();
    assert!(target.buffers().iter().all(|t| !buffers.contains(&t.id())));
    assert_eq!(target.parameters().len(), online.parameters().len());
    // The tie inside the model is a tie in the copy.
    assert!(online.tied() && target.tied());
    assert_eq!(target.label, "zoo");
    let mut opt = Sgd::new(target.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
    for _ in 0..3 {
        opt.zero_grad();
        target.forward(&ids()).square().mean().backward();
        opt.step();
    }
    assert_eq!(bits(&online.state_dict()), before, "the original is untouched");
    assert_ne!(bits(&target.state_dict()), before, "the copy trained");
    assert!(online.parameters().iter().all(|p| p.grad().is_none()), "no gradient reached the original");
    assert!(target.tied(), "still one tensor after training");
}

#[test]
fn a_copy_keeps_mode_dtype_and_laziness_and_drops_gradients_and_hooks() {
    let mut m = Zoo::new();
    m.eval();
    m.scale.requires_grad_(false);
    m.lm_head.forward(&Tensor::ones(&[1, 6])).sum().backward();
    assert!(m.wte.weight.grad().is_some());
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let f = fired.clone();
    let h = m
        .body
        .register_forward_hook(move |_, _| {
            f.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            None
        })
        .unwrap();
    let c = m.deep_copy();
    assert!(!c.is_training() && !c.norm.is_training() && !c.body.is_training());
    assert!(!c.scale.requires_grad() && c.wte.weight.requires_grad());
    assert!(c.lazy.is_uninitialized(), "a lazy layer that has not run copies as lazy");
    c.forward(&ids());
    assert!(c.parameters().iter().all(|p| p.grad().is_none()), "gradients are not copied");
    assert_eq!(fired.load(std::sync::atomic::Ordering::SeqCst), 0, "the original's hook is not copied");
    assert!(m.lazy.is_uninitialized(), "running the copy materialises the copy's layer only");
    m.forward(&ids());
    assert_eq!(fired.load(std::sync::atomic::Ordering::SeqCst), 1);
    h.remove();
    // The dtype (and device) of every tensor is kept.
    let mut s = Sequential::new().add(Linear::new(2, 2)).add(BatchNorm1d::new(2));
    s.to_dtype(DType::F64);
    let c = s.deep_copy();
    assert!(c.state_dict().values().all(|t| t.dtype() == DType::F64 || t.dtype() == DType::I64));
    assert_eq!(c.state_dict().get("1.num_batches_tracked").unwrap().dtype(), DType::I64);
    assert!(c.parameters().iter().all(|p| p.device() == Device::Cpu));
}

/// An EMA target network, as on the "coming from PyTorch" page: the copy follows the
/// online network only through the update written for it.
#[test]
fn an_ema_target_network() {
    nn_core::manual_seed(1);
    let online = Sequential::new().add(Linear::new(3, 4)).add(ReLU::new()).add(Linear::new(4, 1));
    let target = online.deep_copy();
    target.requires_grad_(false);
    let mut opt = Sgd::new(online.parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    let x = Tensor::randn(&[8, 3]);
    for _ in 0..2 {
        opt.zero_grad();
        online.forward(&x).square().mean().backward();
        opt.step();
        no_grad(|| {
            for (t, o) in target.parameters().iter().zip(online.parameters()) {
                t.mul_(0.9).add_(&(&*o * 0.1));
            }
        });
    }
    let (o, t) = (online.state_dict(), target.state_dict());
    for (k, v) in o.iter() {
        assert_ne!(v.to_vec(), t.get(k).unwrap().to_vec(), "{k}: the target lags behind");
    }
}

#[test]
fn a_plain_field_that_is_not_clone_stops_the_copy_by_name() {
    struct Handle;
    #[derive(Module)]
    struct Holder {
        #[param]
        w: Parameter,
        handle: Handle,
    }
    let m = Holder { w: Parameter::new(Tensor::ones(&[1])), handle: Handle };
    let _ = &m.handle;
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(m.deep_copy()))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("deep_copy: the plain field `handle` of `Holder` (type `"), "{msg}");
    assert!(msg.contains("Handle`) is not `Clone`"), "{msg}");
}

/// `struct Raw(Parameter)` with a hand-written `Module` impl (one parameter, `w`), with or
/// without its own `deep_copy_into`.
macro_rules! raw_module {
    ($(with $copy:ident)?) => {
        struct Raw(Parameter);
        impl HoldsState for Raw {}
        impl Module for Raw {
            fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
                f(Name::Field("w"), Item::Param(&self.0));
            }
            fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
            fn type_name(&self) -> &'static str {
                "Raw"
            }
            $(
                fn $copy(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
                    slot.put(Raw(copier.parameter(&self.0)));
                }
            )?
            nn_core::module_accessors!();
        }
    };
}

#[test]
fn a_hand_written_module_without_deep_copy_into_is_refused_by_name() {
    raw_module!();
    #[derive(Module)]
    struct Outer {
        #[module]
        raw: Raw,
    }
    let m = Outer { raw: Raw(Parameter::new(Tensor::ones(&[1]))) };
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(m.deep_copy()))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("deep_copy: `Raw` implements `Module` by hand without `deep_copy_into`"), "{msg}");
}

/// A hand-written impl copies through the same `DeepCopier`, so ties between it and the
/// derived parts of the tree are kept.
#[test]
fn a_hand_written_deep_copy_into_shares_the_record_of_ties() {
    raw_module!(with deep_copy_into);
    #[derive(Module)]
    struct Outer {
        #[module]
        raw: Box<Raw>,
        #[param]
        same: Parameter,
    }
    let p = Parameter::new(Tensor::ones(&[2]));
    let m = Outer { raw: Box::new(Raw(p.clone())), same: p };
    let c = m.deep_copy();
    assert_eq!(c.raw.0.id(), c.same.id());
    assert_ne!(c.same.id(), m.same.id());
}

/// `Box<dyn Layer>` fields and containers of them copy to layers of the same concrete type
/// (the slot has no room for anything else).
#[test]
fn boxed_dyn_layers_copy() {
    #[derive(Module)]
    struct Block {
        #[module]
        act: Box<dyn Layer>,
        #[module]
        maybe: Option<Box<dyn Layer>>,
        #[module]
        list: ModuleList<Box<dyn Layer>>,
    }
    let b = Block {
        act: Box::new(Linear::new(2, 2)),
        maybe: Some(Box::new(ReLU::new())),
        list: ModuleList::from(vec![Box::new(Linear::new(2, 3)) as Box<dyn Layer>]),
    };
    let c = b.deep_copy();
    assert_eq!(c.act.type_name(), "Linear");
    assert_eq!(c.maybe.as_ref().unwrap().type_name(), "ReLU");
    assert_eq!(c.list[0].type_name(), "Linear");
    assert_ne!(c.act.parameters()[0].id(), b.act.parameters()[0].id());
    let x = Tensor::ones(&[1, 2]);
    assert_eq!(c.list[0].forward(&c.act.forward(&x)).to_vec(), b.list[0].forward(&b.act.forward(&x)).to_vec());
    // A boxed layer added to a Sequential (boxed once more inside it).
    let s = Sequential::new().add(Box::new(Linear::new(2, 2)) as Box<dyn Layer>);
    let sc = s.deep_copy();
    assert_eq!(sc.forward(&x).to_vec(), s.forward(&x).to_vec());
    assert_ne!(sc.parameters()[0].id(), s.parameters()[0].id());
}

/// One tensor registered as a parameter and as a buffer stays one tensor in the copy.
#[test]
fn a_tensor_registered_twice_stays_one() {
    #[derive(Module)]
    struct Twice {
        #[param]
        w: Parameter,
        #[buffer]
        same: Tensor,
    }
    let w = Parameter::new(Tensor::ones(&[2]));
    let m = Twice { same: w.tensor().clone(), w };
    let c = m.deep_copy();
    no_grad(|| c.w.add_(1.0));
    assert_eq!(c.same.to_vec(), vec![2.0, 2.0], "the buffer is the copied parameter's storage");
    assert_eq!(m.same.to_vec(), vec![1.0, 1.0]);
}
