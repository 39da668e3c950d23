// Plain-data fields of many types need no annotation and no trait impl: numbers,
// `String`, `Vec<f32>`, `HashMap<String, usize>`, tuples of plain data (in a `Vec` too), arrays, `Option`s of
// plain data, function pointers, `'static` references, `PhantomData<Self>`, and generic
// parameters without bounds (`T`, `Vec<T>`), even when `T` is later instantiated with a
// module type.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;

use nn_core::{DType, Device, Module, Parameter, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Config<'a, T, const N: usize> {
    #[param]
    w: Parameter,
    hidden: usize,
    dropout: f32,
    name: String,
    label: &'a str,
    weights: Vec<f32>,
    vocab: HashMap<String, usize>,
    ordered: BTreeMap<usize, String>,
    shape: (usize, usize),
    named: Vec<(String, usize)>,
    dims: [usize; N],
    maybe: Option<u64>,
    boxed: Box<str>,
    shared: Arc<Vec<i32>>,
    act: fn(f32) -> f32,
    dtype: DType,
    device: Device,
    extra: T,
    many: Vec<T>,
    unit: (),
    marker: PhantomData<Self>,
}

fn main() {
    let c = Config {
        w: Parameter::new(Tensor::ones(&[3])),
        hidden: 4,
        dropout: 0.1,
        name: "cfg".into(),
        label: "x",
        weights: vec![1.0],
        vocab: HashMap::new(),
        ordered: BTreeMap::new(),
        shape: (1, 2),
        named: vec![("a".into(), 1)],
        dims: [1, 2, 3],
        maybe: None,
        boxed: "b".into(),
        shared: Arc::new(vec![]),
        act: f32::abs,
        dtype: DType::F32,
        device: Device::Cpu,
        // An unbounded `T` is plain data, whatever it is instantiated with.
        extra: Linear::new(1, 1),
        many: Vec::<Linear>::new(),
        unit: (),
        marker: PhantomData,
    };
    assert_eq!(c.num_parameters(), 3);
    assert_eq!(c.named_children().len(), 0);
    let _ = (&c.hidden, &c.dropout, &c.name, &c.label, &c.weights, &c.vocab, &c.ordered, &c.shape);
    let _ = (&c.dims, &c.maybe, &c.boxed, &c.shared, (c.act)(-1.0), &c.dtype, &c.device, &c.extra);
    let _ = (&c.many, &c.unit, &c.marker, &c.named);
}
