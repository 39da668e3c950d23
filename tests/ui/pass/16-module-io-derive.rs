// `#[derive(ModuleIo)]`: every field a slot (or none, for plain data), the primary first;
// hooks see and replace them.

use nn_core::module::{IoSlots, IoTensors};
use nn_core::prelude::*;
use nn_core::{HookConfig, ModuleIo};

#[derive(Clone)]
struct Masks {
    causal: Tensor,
    padding: Option<Tensor>,
}

impl IoTensors for Masks {
    fn absent_slots() -> usize {
        2
    }
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
        self.causal.push_tensors(out);
        self.padding.push_tensors(out);
    }
    fn take_tensors(&self, slots: &mut IoSlots) -> Self {
        Masks { causal: slots.take(&self.causal), padding: slots.take(&self.padding) }
    }
}

#[derive(Clone, ModuleIo)]
struct Input {
    scale: f64,
    #[io(primary)]
    x: Tensor,
    masks: Masks,
    bias: Option<Tensor>,
}

#[derive(Module)]
struct Scaled {
    #[base]
    base: ModuleBase,
}

impl Compute for Scaled {
    type Input = Input;
    type Output = Tensor;
    fn compute(&self, i: &Input) -> Tensor {
        let y = &i.x * &i.masks.causal * i.scale;
        match &i.bias {
            Some(b) => y + b,
            None => y,
        }
    }
}

fn main() {
    let m = Scaled { base: ModuleBase::new() };
    let input = Input { scale: 2.0, x: Tensor::ones(&[2]), masks: Masks { causal: Tensor::ones(&[2]), padding: None }, bias: None };
    assert_eq!(input.tensors().len(), 4);
    m.register_forward_pre_hook_tensors(HookConfig::default(), |_, xs| {
        let mut xs = xs.to_vec();
        xs[3] = Some(Tensor::ones(&[2]));
        Some(xs)
    })
    .unwrap();
    assert_eq!(m.forward(&input).to_vec(), [3.0, 3.0]);
}
