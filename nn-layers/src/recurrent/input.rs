//! The inputs of the recurrent layers: [`RNNInput`] (of [`RNN`](super::RNN) and
//! [`GRU`](super::GRU)) and [`LSTMInput`] (of [`LSTM`](super::LSTM)), each converting from
//! a bare `&Tensor` (zero initial states) and from a tuple with the initial states.

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{ModuleIo, Tensor};

/// The input of [`RNN`](super::RNN) and [`GRU`](super::GRU): PyTorch's `forward(input, hx=None)`.
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
#[derive(Clone, Debug, ModuleIo)]
pub struct RNNInput {
    /// `[L, N, H_in]` (`[N, L, H_in]` batch-first, `[L, H_in]` unbatched): the primary
    /// input, which hooks see.
    #[io(primary)]
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

/// The input of [`LSTM`](super::LSTM): PyTorch's `forward(input, hx=None)` with `hx = (h_0, c_0)`.
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
#[derive(Clone, Debug, ModuleIo)]
pub struct LSTMInput {
    /// `[L, N, H_in]` (`[N, L, H_in]` batch-first, `[L, H_in]` unbatched): the primary
    /// input, which hooks see.
    #[io(primary)]
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
