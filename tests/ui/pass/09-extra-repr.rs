// `#[module(extra_repr)]` on the struct prints `ExtraRepr::extra_repr` in the module's
// line of the printout, as PyTorch's `extra_repr` override.

use nn_core::{ExtraRepr, Module};
use nn_layers::Linear;

#[derive(Module)]
#[module(extra_repr)]
struct Scale {
    factor: f32,
}

impl ExtraRepr for Scale {
    fn extra_repr(&self) -> String {
        format!("factor={}", self.factor)
    }
}

#[derive(Module)]
struct Net {
    #[module]
    fc: Linear,
    #[module]
    scale: Scale,
}

fn main() {
    let s = Scale { factor: 2.0 };
    // `Module` has an `extra_repr` method too: name the trait.
    assert_eq!(ExtraRepr::extra_repr(&s), "factor=2");
    assert_eq!(s.to_string(), "Scale(factor=2)");
    let net = Net { fc: Linear::new(2, 3), scale: s };
    assert_eq!(
        net.to_string(),
        "Net(\n  (fc): Linear(in_features=2, out_features=3, bias=True)\n  (scale): Scale(factor=2)\n)"
    );
}
