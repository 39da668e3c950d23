//! The engine behind [`RNN`](super::RNN), [`LSTM`](super::LSTM) and [`GRU`](super::GRU)
//! (PyTorch's `nn.RNNBase`): the weights of every layer and direction, the checks of an
//! input against them, and the time loop of each cell.

use nn_core::module::parametrize::optional_value;
use nn_core::module::DeepCopier;
use nn_core::{functional, Item, ModuleBase, Name, Parameter, Tensor};

use super::config::{RecurrentConfig, RnnNonlinearity};
use crate::repr::{py_bool, py_float};

/// Which cell a [`Recurrent`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cell {
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
pub(super) struct CellWeights {
    names: [String; 5],
    pub(super) w_ih: Parameter,
    pub(super) w_hh: Parameter,
    pub(super) b_ih: Option<Parameter>,
    pub(super) b_hh: Option<Parameter>,
    pub(super) w_hr: Option<Parameter>,
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
    pub(super) fn named(&self) -> impl Iterator<Item = (&String, &Parameter)> {
        let params = [Some(&self.w_ih), Some(&self.w_hh), self.b_ih.as_ref(), self.b_hh.as_ref(), self.w_hr.as_ref()];
        self.names.iter().zip(params).filter_map(|(n, p)| p.map(|p| (n, p)))
    }
}

/// The engine behind [`RNN`](super::RNN), [`LSTM`](super::LSTM) and [`GRU`](super::GRU):
/// PyTorch's `nn.RNNBase`.
pub(super) struct Recurrent {
    pub(super) cell: Cell,
    pub(super) input_size: usize,
    pub(super) hidden_size: usize,
    pub(super) num_layers: usize,
    pub(super) bias: bool,
    pub(super) batch_first: bool,
    pub(super) dropout: f64,
    pub(super) bidirectional: bool,
    /// The LSTM's projection size, 0 for none.
    pub(super) proj_size: usize,
    /// Layer-major, then direction: index `layer * directions + direction`.
    pub(super) weights: Vec<CellWeights>,
    pub(super) base: ModuleBase,
}

/// The shape of a checked input: batched or not, and `(L, N)` (`N = 1` unbatched).
pub(super) struct SequenceShape {
    batched: bool,
    seq_len: usize,
    batch: usize,
}

impl Recurrent {
    /// The engine of a deep copy: new weights, the same settings, no hooks.
    pub(super) fn deep_copy(&self, c: &mut DeepCopier) -> Self {
        Recurrent {
            weights: self.weights.iter().map(|w| w.deep_copy(c)).collect(),
            base: self.base.deep_copy(),
            ..*self
        }
    }

    #[track_caller]
    pub(super) fn new(name: &str, cell: Cell, input_size: usize, hidden_size: usize, c: RecurrentConfig) -> Self {
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

    pub(super) fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (name, p) in self.weights.iter().flat_map(CellWeights::named) {
            // Through `report`, so that a weight can be parametrized (`weight_norm` on an LSTM).
            nn_core::module::parametrize::report(p, Name::Key(name), f);
        }
    }

    /// PyTorch's `RNNBase.extra_repr`: options printed only where they differ from the
    /// defaults.
    pub(super) fn extra_repr(&self) -> String {
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
    pub(super) fn check(&self, label: &str, x: &Tensor, states: &[(&str, Option<&Tensor>)]) -> SequenceShape {
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
        SequenceShape { batched, seq_len, batch }
    }

    /// Runs the stack on a checked input; returns the output in the input's layout, `h_n`
    /// and, for the LSTM, `c_n`.
    pub(super) fn run(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
        l: SequenceShape,
    ) -> (Tensor, Tensor, Option<Tensor>) {
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
        // Every weight read through `value()`, so that parametrized ones are computed.
        let (b_ih, b_hh) = (optional_value(&w.b_ih), optional_value(&w.b_hh));
        let (b_ih, b_hh) = (b_ih.as_deref(), b_hh.as_deref());
        // The input projections of every step in one product. RNN and LSTM add both
        // biases outside the nonlinearity, so they fold into it; the GRU keeps `b_hn`
        // inside `r * (W_hn h + b_hn)`.
        let folded = match (self.cell, b_ih, b_hh) {
            (Cell::Gru, _, _) | (_, None, _) => b_ih.cloned(),
            (_, Some(bi), Some(bh)) => Some(bi + bh),
            (_, Some(bi), None) => Some(bi.clone()),
        };
        let xi = functional::linear(x, &w.w_ih.value(), folded.as_ref()); // [L, N, G * H]
        let w_hh_t = w.w_hh.value().t();
        let w_hr_t = w.w_hr.as_ref().map(|w| w.value().t());
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
    pub(super) fn weights(&self, label: &str, layer: usize, reverse: bool) -> &CellWeights {
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
