//! `RNN`, `LSTM`, `GRU` (PyTorch's recurrent layers) and their inputs, `RNNInput` and
//! `LSTMInput`.
//!
//! The three share one engine: per layer and direction, the input projections of every
//! time step are one product (`x W_ih^T + b_ih` over `[L * N, H_in]`), then each step runs
//! one `h W_hh^T` product and the cell's gates. Everything is composed of differentiable
//! ops (`addmm`, `narrow`, `sigmoid`, `tanh`, `stack`, `cat`), so backward is autograd's
//! and the layers run on every device those ops run on.

use std::borrow::Cow;

use nn_core::module::{CopySlot, DeepCopier, ForwardArg, HoldsState};
use nn_core::{functional, Compute, HasBase, Item, Module, ModuleBase, ModuleIo, Name, Parameter, Tensor};

use crate::repr::{py_bool, py_float};

/// The nonlinearity of an [`RNN`]'s cell (PyTorch's `nonlinearity='tanh' | 'relu'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RnnNonlinearity {
    /// `h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`, PyTorch's default.
    #[default]
    Tanh,
    /// `h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh)`.
    Relu,
}

/// Options of [`RNN`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RNNConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// The cell's nonlinearity (default tanh).
    pub nonlinearity: RnnNonlinearity,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, H]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
}

impl Default for RNNConfig {
    fn default() -> Self {
        RNNConfig {
            num_layers: 1,
            nonlinearity: RnnNonlinearity::Tanh,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
        }
    }
}

/// Options of [`LSTM`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LSTMConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, *]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
    /// With `proj_size > 0`, the hidden state is projected to `proj_size` features by
    /// `weight_hr_l*` (`h = W_hr (o * tanh(c))`); 0 (the default) is no projection. Must
    /// be smaller than `hidden_size`.
    pub proj_size: usize,
}

impl Default for LSTMConfig {
    fn default() -> Self {
        LSTMConfig { num_layers: 1, bias: true, batch_first: false, dropout: 0.0, bidirectional: false, proj_size: 0 }
    }
}

/// Options of [`GRU`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GRUConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, H]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
}

impl Default for GRUConfig {
    fn default() -> Self {
        GRUConfig { num_layers: 1, bias: true, batch_first: false, dropout: 0.0, bidirectional: false }
    }
}

/// The options every recurrent layer has (PyTorch's `RNNBase` arguments but `mode`).
#[derive(Clone, Copy, Debug)]
struct Options {
    num_layers: usize,
    bias: bool,
    batch_first: bool,
    dropout: f64,
    bidirectional: bool,
    proj_size: usize,
}

/// The input of [`RNN`] and [`GRU`]: PyTorch's `forward(input, hx=None)`.
///
/// `rnn.forward(&x)` starts from zero states; `rnn.forward((&x, &h0))` or
/// `rnn.forward(&RNNInput::new(&x).hx(&h0))` from `h0`.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{RNNInput, GRU};
/// let gru = GRU::new(3, 4);
/// let (x, h0) = (Tensor::randn(&[5, 2, 3]), Tensor::randn(&[1, 2, 4]));
/// let (y, h_n) = gru.forward(&RNNInput::new(&x).hx(&h0));
/// assert_eq!((y.shape(), h_n.shape()), (&[5, 2, 4][..], &[1, 2, 4][..]));
/// assert_eq!(gru.forward((&x, &h0)).0.to_vec(), y.to_vec());
/// assert_ne!(gru.forward(&x).0.to_vec(), y.to_vec()); // zero states instead of h0
/// ```
#[derive(Clone, Debug)]
pub struct RNNInput {
    /// `[L, N, H_in]` (`[N, L, H_in]` batch-first, `[L, H_in]` unbatched): the primary
    /// input, which hooks see.
    pub input: Tensor,
    /// The initial hidden state `h_0`, `[layers * directions, N, H]` (`[layers *
    /// directions, H]` unbatched); zeros when `None`.
    pub hx: Option<Tensor>,
}

impl RNNInput {
    /// The input, starting from zero states.
    pub fn new(input: &Tensor) -> Self {
        RNNInput { input: input.clone(), hx: None }
    }

    /// Sets the initial hidden state `h_0`.
    pub fn hx(mut self, h0: &Tensor) -> Self {
        self.hx = Some(h0.clone());
        self
    }
}

impl ModuleIo for RNNInput {
    fn primary(&self) -> &Tensor {
        &self.input
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        RNNInput { input: primary, ..self.clone() }
    }
}

impl<'a> ForwardArg<'a, RNNInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, RNNInput> {
        Cow::Owned(RNNInput::new(self))
    }
}

impl<'a> ForwardArg<'a, RNNInput> for (&'a Tensor, &'a Tensor) {
    fn into_input(self) -> Cow<'a, RNNInput> {
        Cow::Owned(RNNInput::new(self.0).hx(self.1))
    }
}

/// The input of [`LSTM`]: PyTorch's `forward(input, hx=None)` with `hx = (h_0, c_0)`.
///
/// `lstm.forward(&x)` starts from zero states; `lstm.forward((&x, (&h0, &c0)))` or
/// `lstm.forward(&LSTMInput::new(&x).hx(&h0, &c0))` from `(h0, c0)`.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{LSTMInput, LSTM};
/// let lstm = LSTM::new(3, 4);
/// let (x, h0, c0) = (Tensor::randn(&[6, 3]), Tensor::randn(&[1, 4]), Tensor::randn(&[1, 4])); // unbatched
/// let (y, (h_n, c_n)) = lstm.forward(&LSTMInput::new(&x).hx(&h0, &c0));
/// assert_eq!((y.shape(), h_n.shape(), c_n.shape()), (&[6, 4][..], &[1, 4][..], &[1, 4][..]));
/// assert_eq!(lstm.forward((&x, (&h0, &c0))).0.to_vec(), y.to_vec());
/// ```
#[derive(Clone, Debug)]
pub struct LSTMInput {
    /// `[L, N, H_in]` (`[N, L, H_in]` batch-first, `[L, H_in]` unbatched): the primary
    /// input, which hooks see.
    pub input: Tensor,
    /// The initial hidden and cell states `(h_0, c_0)`, each `[layers * directions, N, H]`
    /// (`[layers * directions, H]` unbatched); zeros when `None`.
    pub hx: Option<(Tensor, Tensor)>,
}

impl LSTMInput {
    /// The input, starting from zero states.
    pub fn new(input: &Tensor) -> Self {
        LSTMInput { input: input.clone(), hx: None }
    }

    /// Sets the initial hidden and cell states `(h_0, c_0)`.
    pub fn hx(mut self, h0: &Tensor, c0: &Tensor) -> Self {
        self.hx = Some((h0.clone(), c0.clone()));
        self
    }
}

impl ModuleIo for LSTMInput {
    fn primary(&self) -> &Tensor {
        &self.input
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        LSTMInput { input: primary, ..self.clone() }
    }
}

impl<'a> ForwardArg<'a, LSTMInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, LSTMInput> {
        Cow::Owned(LSTMInput::new(self))
    }
}

impl<'a> ForwardArg<'a, LSTMInput> for (&'a Tensor, (&'a Tensor, &'a Tensor)) {
    fn into_input(self) -> Cow<'a, LSTMInput> {
        Cow::Owned(LSTMInput::new(self.0).hx(self.1 .0, self.1 .1))
    }
}

/// Which cell a [`Recurrent`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Rnn(RnnNonlinearity),
    Lstm,
    Gru,
}

impl Cell {
    /// Gates stacked in the weights' rows: `weight_ih_l*` is `[gates * H, H_in]`.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn(_) => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

/// The weights of one layer in one direction, PyTorch's `weight_ih_l{k}{suffix}`,
/// `weight_hh_l{k}{suffix}`, `bias_ih_l{k}{suffix}`, `bias_hh_l{k}{suffix}` and, for an
/// LSTM with a projection, `weight_hr_l{k}{suffix}`.
struct CellWeights {
    names: [String; 5],
    w_ih: Parameter,
    w_hh: Parameter,
    b_ih: Option<Parameter>,
    b_hh: Option<Parameter>,
    w_hr: Option<Parameter>,
}

impl CellWeights {
    /// The weights of a deep copy.
    fn deep_copy(&self, c: &mut DeepCopier) -> Self {
        CellWeights {
            names: self.names.clone(),
            w_ih: c.parameter(&self.w_ih),
            w_hh: c.parameter(&self.w_hh),
            b_ih: self.b_ih.as_ref().map(|p| c.parameter(p)),
            b_hh: self.b_hh.as_ref().map(|p| c.parameter(p)),
            w_hr: self.w_hr.as_ref().map(|p| c.parameter(p)),
        }
    }

    /// The registered parameters with their names, in PyTorch's order.
    fn named(&self) -> impl Iterator<Item = (&String, &Parameter)> {
        let params = [Some(&self.w_ih), Some(&self.w_hh), self.b_ih.as_ref(), self.b_hh.as_ref(), self.w_hr.as_ref()];
        self.names.iter().zip(params).filter_map(|(n, p)| p.map(|p| (n, p)))
    }
}

/// The engine behind [`RNN`], [`LSTM`] and [`GRU`]: PyTorch's `nn.RNNBase`.
struct Recurrent {
    cell: Cell,
    input_size: usize,
    hidden_size: usize,
    num_layers: usize,
    bias: bool,
    batch_first: bool,
    dropout: f64,
    bidirectional: bool,
    /// The LSTM's projection size, 0 for none.
    proj_size: usize,
    /// Layer-major, then direction: index `layer * directions + direction`.
    weights: Vec<CellWeights>,
    base: ModuleBase,
}

/// The shapes of a checked input: batched or not, and `(L, N)` (`N = 1` unbatched).
struct Layout {
    batched: bool,
    seq_len: usize,
    batch: usize,
}

impl Recurrent {
    /// The engine of a deep copy: new weights, the same settings, no hooks.
    fn deep_copy(&self, c: &mut DeepCopier) -> Self {
        Recurrent {
            weights: self.weights.iter().map(|w| w.deep_copy(c)).collect(),
            base: self.base.deep_copy(),
            ..*self
        }
    }

    #[track_caller]
    fn new(name: &str, cell: Cell, input_size: usize, hidden_size: usize, c: Options) -> Self {
        if input_size == 0 {
            panic!("{name}: input_size must be greater than zero, got 0");
        }
        if hidden_size == 0 || c.num_layers == 0 {
            panic!(
                "{name}: hidden_size and num_layers must be positive, got hidden_size={hidden_size}, num_layers={}",
                c.num_layers
            );
        }
        if !(0.0..=1.0).contains(&c.dropout) {
            panic!("{name}: dropout must be a probability in [0, 1], got {}", c.dropout);
        }
        if c.dropout > 0.0 && c.num_layers == 1 {
            // PyTorch warns and ignores it; here an option that can do nothing is an error.
            panic!(
                "{name}: dropout {} has no effect with num_layers=1 (it applies between stacked layers); set \
                 num_layers above 1 or dropout to 0",
                c.dropout
            );
        }
        if c.proj_size >= hidden_size {
            panic!("{name}: proj_size ({}) must be smaller than hidden_size ({hidden_size})", c.proj_size);
        }
        let dirs = if c.bidirectional { 2 } else { 1 };
        let gh = cell.gates() * hidden_size;
        // The size of h: the projection's when there is one.
        let h_size = if c.proj_size > 0 { c.proj_size } else { hidden_size };
        // PyTorch's `reset_parameters`: every weight and bias U(-1/sqrt(H), 1/sqrt(H)),
        // drawn in registration order.
        let bound = 1.0 / (hidden_size as f64).sqrt();
        let uniform = |shape: &[usize]| Parameter::new(Tensor::uniform(shape, -bound, bound));
        let mut weights = Vec::with_capacity(c.num_layers * dirs);
        for layer in 0..c.num_layers {
            let layer_in = if layer == 0 { input_size } else { h_size * dirs };
            for dir in 0..dirs {
                let suffix = if dir == 1 { "_reverse" } else { "" };
                let names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"]
                    .map(|k| format!("{k}_l{layer}{suffix}"));
                let w_ih = uniform(&[gh, layer_in]);
                let w_hh = uniform(&[gh, h_size]);
                let b_ih = c.bias.then(|| uniform(&[gh]));
                let b_hh = c.bias.then(|| uniform(&[gh]));
                let w_hr = (c.proj_size > 0).then(|| uniform(&[c.proj_size, hidden_size]));
                weights.push(CellWeights { names, w_ih, w_hh, b_ih, b_hh, w_hr });
            }
        }
        Recurrent {
            cell,
            input_size,
            hidden_size,
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: c.proj_size,
            weights,
            base: ModuleBase::default(),
        }
    }

    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// The size of the hidden state `h`: `proj_size` for a projecting LSTM, else `H`.
    fn h_size(&self) -> usize {
        if self.proj_size > 0 {
            self.proj_size
        } else {
            self.hidden_size
        }
    }

    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (name, p) in self.weights.iter().flat_map(CellWeights::named) {
            f(Name::Key(name), Item::Param(p));
        }
    }

    /// PyTorch's `RNNBase.extra_repr`: options printed only where they differ from the
    /// defaults.
    fn extra_repr(&self) -> String {
        let mut s = format!("{}, {}", self.input_size, self.hidden_size);
        if self.proj_size != 0 {
            s += &format!(", proj_size={}", self.proj_size);
        }
        if self.num_layers != 1 {
            s += &format!(", num_layers={}", self.num_layers);
        }
        if !self.bias {
            s += &format!(", bias={}", py_bool(self.bias));
        }
        if self.batch_first {
            s += &format!(", batch_first={}", py_bool(self.batch_first));
        }
        if self.dropout != 0.0 {
            s += &format!(", dropout={}", py_float(self.dropout));
        }
        if self.bidirectional {
            s += &format!(", bidirectional={}", py_bool(self.bidirectional));
        }
        s
    }

    /// Checks the input and the initial states against the layer; every message names
    /// the layer (`label`) and the shapes involved.
    #[track_caller]
    fn check(&self, label: &str, x: &Tensor, states: &[(&str, Option<&Tensor>)]) -> Layout {
        let i = self.input_size;
        let layout = if self.batch_first { "[N, L, H_in]" } else { "[L, N, H_in]" };
        let batched = match x.rank() {
            3 => true,
            2 => false,
            _ => panic!("{label} expects input {layout} (or unbatched [L, H_in]) with H_in = {i}, got {:?}", x.shape()),
        };
        if x.shape()[x.rank() - 1] != i {
            let layout = if batched { layout } else { "[L, H_in]" };
            panic!("{label} expects input {layout} with H_in = {i}, got {:?}", x.shape());
        }
        if !x.dtype().is_compute_float() {
            panic!("{label} expects a floating-point input, got {} of shape {:?}", x.dtype(), x.shape());
        }
        let (seq_len, batch) = match (batched, self.batch_first) {
            (false, _) => (x.shape()[0], 1),
            (true, false) => (x.shape()[0], x.shape()[1]),
            (true, true) => (x.shape()[1], x.shape()[0]),
        };
        if seq_len == 0 {
            panic!("{label} expects a sequence of at least one step, got input {:?}", x.shape());
        }
        let stacked = self.num_layers * self.directions();
        for &(what, s) in states {
            let Some(s) = s else { continue };
            // The cell state has H features; the hidden state proj_size when projected.
            let (size, size_name) = if what == "h_0" && self.proj_size > 0 {
                (self.proj_size, "proj_size")
            } else {
                (self.hidden_size, "H")
            };
            let want: Vec<usize> = if batched { vec![stacked, batch, size] } else { vec![stacked, size] };
            if s.shape() != want.as_slice() {
                panic!(
                    "{label} expects {what} {want:?} ([num_layers * num_directions, {}{size_name}]) for input {:?}, got {:?}",
                    if batched { "N, " } else { "" },
                    x.shape(),
                    s.shape()
                );
            }
            if s.dtype() != x.dtype() {
                panic!("{label}: {what} is {} but the input is {}", s.dtype(), x.dtype());
            }
            if s.device() != x.device() {
                panic!("{label}: {what} is on {} but the input is on {}", s.device(), x.device());
            }
        }
        Layout { batched, seq_len, batch }
    }

    /// Runs the stack on a checked input; returns the output in the input's layout, `h_n`
    /// and, for the LSTM, `c_n`.
    fn run(&self, x: &Tensor, h0: Option<&Tensor>, c0: Option<&Tensor>, l: Layout) -> (Tensor, Tensor, Option<Tensor>) {
        let lstm = self.cell == Cell::Lstm;
        // Work time-major and batched: [L, N, H_in], states [layers * D, N, *].
        let x = match (l.batched, self.batch_first) {
            (false, _) => x.unsqueeze(1),
            (true, false) => x.clone(),
            (true, true) => x.transpose(0, 1),
        };
        let state = |s: Option<&Tensor>| s.map(|s| if l.batched { s.clone() } else { s.unsqueeze(1) });
        let (h0, c0) = (state(h0), state(c0));
        let (dtype, device) = (x.dtype(), x.device());
        let zeros = |size: usize| Tensor::full_on(&[l.batch, size], 0.0, dtype, device);
        let dirs = self.directions();
        let training = self.base.is_training();
        let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
        let mut layer_in = x;
        for layer in 0..self.num_layers {
            let mut outs = Vec::with_capacity(dirs);
            for dir in 0..dirs {
                let k = layer * dirs + dir;
                let h = h0.as_ref().map_or_else(|| zeros(self.h_size()), |h| h.narrow(0, k, 1).squeeze_dim(0));
                let c = lstm
                    .then(|| c0.as_ref().map_or_else(|| zeros(self.hidden_size), |c| c.narrow(0, k, 1).squeeze_dim(0)));
                let (out, h, c) = self.direction(&layer_in, &self.weights[k], h, c, dir == 1, l.seq_len);
                outs.push(out);
                h_n.push(h);
                c_n.extend(c);
            }
            layer_in = match outs.as_slice() {
                [one] => one.clone(),
                [fwd, bwd] => Tensor::cat(&[fwd, bwd], 2),
                _ => unreachable!("one or two directions"),
            };
            if self.dropout > 0.0 && training && layer + 1 < self.num_layers {
                layer_in = layer_in.dropout(self.dropout, true);
            }
        }
        let stack = |v: &[Tensor]| {
            let s = Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
            if l.batched {
                s
            } else {
                s.squeeze_dim(1)
            }
        };
        let output = match (l.batched, self.batch_first) {
            (false, _) => layer_in.squeeze_dim(1),
            (true, false) => layer_in,
            (true, true) => layer_in.transpose(0, 1),
        };
        (output, stack(&h_n), lstm.then(|| stack(&c_n)))
    }

    /// One layer in one direction over `x: [L, N, in]` from `h: [N, H_out]` (and `c:
    /// [N, H]` for the LSTM): the outputs `[L, N, H_out]` in time order and the last
    /// states (`H_out` is `proj_size` for a projecting LSTM, else `H`).
    fn direction(
        &self,
        x: &Tensor,
        w: &CellWeights,
        mut h: Tensor,
        mut c: Option<Tensor>,
        reverse: bool,
        seq_len: usize,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let hs = self.hidden_size;
        let (b_ih, b_hh) = (w.b_ih.as_deref(), w.b_hh.as_deref());
        // The input projections of every step in one product. RNN and LSTM add both
        // biases outside the nonlinearity, so they fold into it; the GRU keeps `b_hn`
        // inside `r * (W_hn h + b_hn)`.
        let folded = match (self.cell, b_ih, b_hh) {
            (Cell::Gru, _, _) | (_, None, _) => b_ih.cloned(),
            (_, Some(bi), Some(bh)) => Some(bi + bh),
            (_, Some(bi), None) => Some(bi.clone()),
        };
        let xi = functional::linear(x, &w.w_ih, folded.as_ref()); // [L, N, G * H]
        let w_hh_t = w.w_hh.t();
        let w_hr_t = w.w_hr.as_ref().map(|w| w.t());
        let mut outs = Vec::with_capacity(seq_len);
        for s in 0..seq_len {
            let t = if reverse { seq_len - 1 - s } else { s };
            let gi = xi.narrow(0, t, 1).squeeze_dim(0); // [N, G * H]
            h = match self.cell {
                Cell::Rnn(act) => {
                    let pre = gi.addmm(&h, &w_hh_t);
                    match act {
                        RnnNonlinearity::Tanh => pre.tanh(),
                        RnnNonlinearity::Relu => pre.relu(),
                    }
                }
                Cell::Lstm => {
                    // Gates i, f, g, o, as PyTorch stacks them.
                    let gates = gi.addmm(&h, &w_hh_t);
                    let sig = gates.sigmoid();
                    let (i, f, o) = (sig.narrow(1, 0, hs), sig.narrow(1, hs, hs), sig.narrow(1, 3 * hs, hs));
                    let g = gates.narrow(1, 2 * hs, hs).tanh();
                    let c_prev = c.take().expect("the LSTM carries a cell state");
                    let c_new = &f * &c_prev + &i * &g;
                    let h_new = &o * &c_new.tanh();
                    c = Some(c_new);
                    match &w_hr_t {
                        Some(w_hr_t) => h_new.matmul(w_hr_t),
                        None => h_new,
                    }
                }
                Cell::Gru => {
                    // Gates r, z, n: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
                    // h' = (1 - z) * n + z * h = n + z * (h - n).
                    let gh = match b_hh {
                        Some(b) => b.addmm(&h, &w_hh_t),
                        None => h.matmul(&w_hh_t),
                    };
                    let rz = (gi.narrow(1, 0, 2 * hs) + gh.narrow(1, 0, 2 * hs)).sigmoid();
                    let (r, z) = (rz.narrow(1, 0, hs), rz.narrow(1, hs, hs));
                    let n = (gi.narrow(1, 2 * hs, hs) + &r * &gh.narrow(1, 2 * hs, hs)).tanh();
                    &n + &(&z * &(&h - &n))
                }
            };
            outs.push(h.clone());
        }
        if reverse {
            outs.reverse();
        }
        let out = Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0);
        (out, h, c)
    }

    /// The weights of layer `layer`, forward (`reverse = false`) or reverse direction.
    #[track_caller]
    fn weights(&self, label: &str, layer: usize, reverse: bool) -> &CellWeights {
        if layer >= self.num_layers || (reverse && !self.bidirectional) {
            panic!(
                "{label}: no weights for layer {layer}{} (num_layers={}, bidirectional={})",
                if reverse { " reverse" } else { "" },
                self.num_layers,
                py_bool(self.bidirectional)
            );
        }
        &self.weights[layer * self.directions() + usize::from(reverse)]
    }
}

/// `HoldsState`, `Module`, `HasBase`, `Display` and the accessors shared by the three
/// recurrent layers, each a struct with one field `inner: Recurrent`.
macro_rules! recurrent_layer {
    ($ty:ident) => {
        impl HoldsState for $ty {}

        impl Module for $ty {
            fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
                self.inner.visit(f)
            }
            fn visit_modules_mut<'a>(&'a mut self, _f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
            fn type_name(&self) -> &'static str {
                stringify!($ty)
            }
            fn extra_repr(&self) -> String {
                self.inner.extra_repr()
            }
            fn base(&self) -> Option<&ModuleBase> {
                Some(&self.inner.base)
            }
            fn base_mut(&mut self) -> Option<&mut ModuleBase> {
                Some(&mut self.inner.base)
            }
            fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
                slot.put($ty { inner: self.inner.deep_copy(copier) });
            }
            nn_core::module_accessors!();
        }

        impl HasBase for $ty {
            fn module_base(&self) -> &ModuleBase {
                &self.inner.base
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                nn_core::module::fmt_module(self, f)
            }
        }

        impl $ty {
            /// Features of the input, `H_in` (PyTorch's `input_size`).
            pub fn input_size(&self) -> usize {
                self.inner.input_size
            }

            /// Features of the hidden state, `H` (PyTorch's `hidden_size`).
            pub fn hidden_size(&self) -> usize {
                self.inner.hidden_size
            }

            /// Stacked layers.
            pub fn num_layers(&self) -> usize {
                self.inner.num_layers
            }

            /// Whether each layer also runs backwards in time.
            pub fn bidirectional(&self) -> bool {
                self.inner.bidirectional
            }

            /// Whether inputs and outputs are `[N, L, *]`.
            pub fn batch_first(&self) -> bool {
                self.inner.batch_first
            }

            /// `weight_ih_l{layer}` (`_reverse` with `reverse`): `[gates * H, H_in]` for
            /// layer 0, `[gates * H, directions * H]` above (`directions * proj_size` for
            /// an LSTM with a projection).
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn weight_ih(&self, layer: usize, reverse: bool) -> &Parameter {
                &self.inner.weights(stringify!($ty), layer, reverse).w_ih
            }

            /// `weight_hh_l{layer}` (`_reverse` with `reverse`): `[gates * H, H]`
            /// (`[4H, proj_size]` for an LSTM with a projection).
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn weight_hh(&self, layer: usize, reverse: bool) -> &Parameter {
                &self.inner.weights(stringify!($ty), layer, reverse).w_hh
            }

            /// `bias_ih_l{layer}` (`_reverse` with `reverse`): `[gates * H]`, `None`
            /// without bias.
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn bias_ih(&self, layer: usize, reverse: bool) -> Option<&Parameter> {
                self.inner.weights(stringify!($ty), layer, reverse).b_ih.as_ref()
            }

            /// `bias_hh_l{layer}` (`_reverse` with `reverse`): `[gates * H]`, `None`
            /// without bias.
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn bias_hh(&self, layer: usize, reverse: bool) -> Option<&Parameter> {
                self.inner.weights(stringify!($ty), layer, reverse).b_hh.as_ref()
            }

            /// PyTorch's `all_weights`: per layer and direction, its `[weight_ih,
            /// weight_hh, bias_ih, bias_hh]` (the weights alone without bias; an LSTM
            /// with a projection adds `weight_hr`).
            pub fn all_weights(&self) -> Vec<Vec<Parameter>> {
                self.inner.weights.iter().map(|w| w.named().map(|(_, p)| p.clone()).collect()).collect()
            }
        }
    };
}

/// An Elman recurrent network (PyTorch's `nn.RNN`):
/// `h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)` (or `relu`), stacked
/// `num_layers` deep, optionally bidirectional.
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[H, H_in]` (`[H, D * H]` for `k > 0`, `D` = 2 when
/// bidirectional), `weight_hh_l{k}` `[H, H]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[H]`.
/// Init (PyTorch's `reset_parameters`): all `U(-1/sqrt(H), 1/sqrt(H))`.
///
/// Input: [`RNNInput`], a `&Tensor` `[L, N, H_in]` (`[N, L, H_in]` with `batch_first`,
/// unbatched `[L, H_in]`) or `(&x, &h0)`. Output `(output, h_n)`: `output` `[L, N, D * H]`
/// (the input's layout), `h_n` `[num_layers * D, N, H]` (`[num_layers * D, H]` unbatched).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{RNNConfig, RnnNonlinearity, RNN};
/// let rnn = RNN::with_config(3, 4, RNNConfig { num_layers: 2, nonlinearity: RnnNonlinearity::Relu, ..Default::default() });
/// assert_eq!(rnn.to_string(), "RNN(3, 4, num_layers=2)");
/// let (y, h_n) = rnn.forward(&Tensor::randn(&[5, 2, 3]));
/// assert_eq!((y.shape(), h_n.shape()), (&[5, 2, 4][..], &[2, 2, 4][..]));
/// // The last step's output is the last layer's final state.
/// assert_eq!(y.narrow(0, 4, 1).to_vec(), h_n.narrow(0, 1, 1).to_vec());
/// ```
pub struct RNN {
    inner: Recurrent,
}

recurrent_layer!(RNN);

impl RNN {
    /// One tanh layer.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, RNNConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, or `dropout` is outside `[0, 1]`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: RNNConfig) -> Self {
        let common = Options {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: 0,
        };
        RNN { inner: Recurrent::new("RNN", Cell::Rnn(c.nonlinearity), input_size, hidden_size, common) }
    }

    /// The cell's nonlinearity.
    pub fn nonlinearity(&self) -> RnnNonlinearity {
        match self.inner.cell {
            Cell::Rnn(act) => act,
            _ => unreachable!("an RNN runs an Elman cell"),
        }
    }
}

impl Compute for RNN {
    type Input = RNNInput;
    /// `(output, h_n)`.
    type Output = (Tensor, Tensor);

    #[track_caller]
    fn compute(&self, a: &RNNInput) -> (Tensor, Tensor) {
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", a.hx.as_ref())]);
        let (y, h, _) = self.inner.run(&a.input, a.hx.as_ref(), None, layout);
        (y, h)
    }
}

/// A long short-term memory network (PyTorch's `nn.LSTM`). Per step, with the gates in
/// PyTorch's order `i, f, g, o` stacked in the weights' rows:
///
/// ```text
/// i = σ(x W_ii^T + b_ii + h W_hi^T + b_hi)    f = σ(x W_if^T + b_if + h W_hf^T + b_hf)
/// g = tanh(x W_ig^T + b_ig + h W_hg^T + b_hg) o = σ(x W_io^T + b_io + h W_ho^T + b_ho)
/// c' = f * c + i * g                          h' = o * tanh(c')   (h' = W_hr (o * tanh(c')) with proj_size)
/// ```
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[4H, H_in]` (`[4H, D * H_out]` for `k > 0`),
/// `weight_hh_l{k}` `[4H, H_out]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[4H]`, and with
/// `proj_size > 0` `weight_hr_l{k}` `[proj_size, H]`; `H_out` is `proj_size` when set,
/// else `H`. Init: all `U(-1/sqrt(H), 1/sqrt(H))`, as PyTorch.
///
/// Input: [`LSTMInput`], a `&Tensor` `[L, N, H_in]` (`[N, L, H_in]` with `batch_first`,
/// unbatched `[L, H_in]`) or `(&x, (&h0, &c0))`. Output `(output, (h_n, c_n))`: `output`
/// `[L, N, D * H_out]` (the input's layout), `h_n` `[num_layers * D, N, H_out]`, `c_n`
/// `[num_layers * D, N, H]` (without `N` unbatched).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{LSTMConfig, LSTM};
/// let cfg = LSTMConfig { num_layers: 2, batch_first: true, bidirectional: true, ..Default::default() };
/// let lstm = LSTM::with_config(10, 20, cfg);
/// assert_eq!(lstm.to_string(), "LSTM(10, 20, num_layers=2, batch_first=True, bidirectional=True)");
/// assert_eq!(lstm.state_dict().get("weight_ih_l1_reverse").unwrap().shape(), &[80, 40]);
/// let x = Tensor::randn(&[3, 5, 10]);
/// let (h0, c0) = (Tensor::zeros(&[4, 3, 20]), Tensor::zeros(&[4, 3, 20]));
/// let (y, (h_n, c_n)) = lstm.forward((&x, (&h0, &c0)));
/// assert_eq!((y.shape(), h_n.shape(), c_n.shape()), (&[3, 5, 40][..], &[4, 3, 20][..], &[4, 3, 20][..]));
/// assert_eq!(lstm.forward(&x).0.to_vec(), y.to_vec()); // zero states by default
/// // A projected hidden state.
/// let proj = LSTM::with_config(10, 20, LSTMConfig { proj_size: 5, ..Default::default() });
/// assert_eq!(proj.to_string(), "LSTM(10, 20, proj_size=5)");
/// let (y, (h_n, c_n)) = proj.forward(&Tensor::randn(&[4, 2, 10]));
/// assert_eq!((y.shape(), h_n.shape(), c_n.shape()), (&[4, 2, 5][..], &[1, 2, 5][..], &[1, 2, 20][..]));
/// ```
pub struct LSTM {
    inner: Recurrent,
}

recurrent_layer!(LSTM);

impl LSTM {
    /// One layer, PyTorch's defaults.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, LSTMConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, `dropout` is outside `[0, 1]`, or
    /// `proj_size` is not smaller than `hidden_size`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: LSTMConfig) -> Self {
        let options = Options {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: c.proj_size,
        };
        LSTM { inner: Recurrent::new("LSTM", Cell::Lstm, input_size, hidden_size, options) }
    }

    /// The projection size, 0 for none.
    pub fn proj_size(&self) -> usize {
        self.inner.proj_size
    }

    /// `weight_hr_l{layer}` (`_reverse` with `reverse`): `[proj_size, H]`, `None` without
    /// a projection.
    ///
    /// # Panics
    /// When the layer or direction does not exist.
    #[track_caller]
    pub fn weight_hr(&self, layer: usize, reverse: bool) -> Option<&Parameter> {
        self.inner.weights("LSTM", layer, reverse).w_hr.as_ref()
    }
}

impl Compute for LSTM {
    type Input = LSTMInput;
    /// `(output, (h_n, c_n))`.
    type Output = (Tensor, (Tensor, Tensor));

    #[track_caller]
    fn compute(&self, a: &LSTMInput) -> (Tensor, (Tensor, Tensor)) {
        let (h0, c0) = (a.hx.as_ref().map(|s| &s.0), a.hx.as_ref().map(|s| &s.1));
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", h0), ("c_0", c0)]);
        let (y, h, c) = self.inner.run(&a.input, h0, c0, layout);
        (y, (h, c.expect("the LSTM returns its cell state")))
    }
}

/// A gated recurrent unit network (PyTorch's `nn.GRU`). Per step, with the gates in
/// PyTorch's order `r, z, n` stacked in the weights' rows:
///
/// ```text
/// r = σ(x W_ir^T + b_ir + h W_hr^T + b_hr)    z = σ(x W_iz^T + b_iz + h W_hz^T + b_hz)
/// n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))
/// h' = (1 - z) * n + z * h
/// ```
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[3H, H_in]` (`[3H, D * H]` for `k > 0`), `weight_hh_l{k}`
/// `[3H, H]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[3H]`. Init: all `U(-1/sqrt(H),
/// 1/sqrt(H))`, as PyTorch.
///
/// Input: [`RNNInput`], as [`RNN`]'s; output `(output, h_n)`, shaped as [`RNN`]'s.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{GRUConfig, GRU};
/// let gru = GRU::with_config(3, 4, GRUConfig { bidirectional: true, ..Default::default() });
/// assert_eq!(gru.to_string(), "GRU(3, 4, bidirectional=True)");
/// let (y, h_n) = gru.forward(&Tensor::randn(&[6, 3])); // unbatched [L, H_in]
/// assert_eq!((y.shape(), h_n.shape()), (&[6, 8][..], &[2, 4][..]));
/// ```
pub struct GRU {
    inner: Recurrent,
}

recurrent_layer!(GRU);

impl GRU {
    /// One layer, PyTorch's defaults.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, GRUConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, or `dropout` is outside `[0, 1]`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: GRUConfig) -> Self {
        let options = Options {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: 0,
        };
        GRU { inner: Recurrent::new("GRU", Cell::Gru, input_size, hidden_size, options) }
    }
}

impl Compute for GRU {
    type Input = RNNInput;
    /// `(output, h_n)`.
    type Output = (Tensor, Tensor);

    #[track_caller]
    fn compute(&self, a: &RNNInput) -> (Tensor, Tensor) {
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", a.hx.as_ref())]);
        let (y, h, _) = self.inner.run(&a.input, a.hx.as_ref(), None, layout);
        (y, h)
    }
}
