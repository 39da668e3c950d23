//! `recurrent_layer!`, the trait impls and accessors that [`RNN`](super::RNN),
//! [`LSTM`](super::LSTM) and [`GRU`](super::GRU) share.

/// `HoldsState`, `Module`, `HasBase`, `Display` and the accessors shared by the three
/// recurrent layers, each a struct with one field `inner: Recurrent`.
macro_rules! recurrent_layer {
    ($ty:ident) => {
        impl ::nn_core::module::HoldsState for $ty {}

        impl ::nn_core::Module for $ty {
            fn visit<'a>(&'a self, f: &mut dyn FnMut(::nn_core::Name<'a>, ::nn_core::Item<'a>)) {
                self.inner.visit(f)
            }
            fn visit_modules_mut<'a>(
                &'a mut self,
                _f: &mut dyn FnMut(::nn_core::Name<'_>, &'a mut dyn ::nn_core::Module),
            ) {
            }
            fn type_name(&self) -> &'static str {
                stringify!($ty)
            }
            fn extra_repr(&self) -> String {
                self.inner.extra_repr()
            }
            fn base(&self) -> Option<&::nn_core::ModuleBase> {
                Some(&self.inner.base)
            }
            fn base_mut(&mut self) -> Option<&mut ::nn_core::ModuleBase> {
                Some(&mut self.inner.base)
            }
            fn deep_copy_into(
                &self,
                copier: &mut ::nn_core::module::DeepCopier,
                slot: ::nn_core::module::CopySlot<'_>,
            ) {
                slot.put($ty { inner: self.inner.deep_copy(copier) });
            }
            ::nn_core::module_accessors!();
        }

        impl ::nn_core::HasBase for $ty {
            fn module_base(&self) -> &::nn_core::ModuleBase {
                &self.inner.base
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                ::nn_core::module::fmt_module(self, f)
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
            pub fn weight_ih(&self, layer: usize, reverse: bool) -> &::nn_core::Parameter {
                &self.inner.weights(stringify!($ty), layer, reverse).w_ih
            }

            /// `weight_hh_l{layer}` (`_reverse` with `reverse`): `[gates * H, H]`
            /// (`[4H, proj_size]` for an LSTM with a projection).
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn weight_hh(&self, layer: usize, reverse: bool) -> &::nn_core::Parameter {
                &self.inner.weights(stringify!($ty), layer, reverse).w_hh
            }

            /// `bias_ih_l{layer}` (`_reverse` with `reverse`): `[gates * H]`, `None`
            /// without bias.
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn bias_ih(&self, layer: usize, reverse: bool) -> Option<&::nn_core::Parameter> {
                self.inner.weights(stringify!($ty), layer, reverse).b_ih.as_ref()
            }

            /// `bias_hh_l{layer}` (`_reverse` with `reverse`): `[gates * H]`, `None`
            /// without bias.
            ///
            /// # Panics
            /// When the layer or direction does not exist.
            #[track_caller]
            pub fn bias_hh(&self, layer: usize, reverse: bool) -> Option<&::nn_core::Parameter> {
                self.inner.weights(stringify!($ty), layer, reverse).b_hh.as_ref()
            }

            /// PyTorch's `all_weights`: per layer and direction, its `[weight_ih,
            /// weight_hh, bias_ih, bias_hh]` (the weights alone without bias; an LSTM
            /// with a projection adds `weight_hr`).
            pub fn all_weights(&self) -> Vec<Vec<::nn_core::Parameter>> {
                self.inner.weights.iter().map(|w| w.named().map(|(_, p)| p.clone()).collect()).collect()
            }
        }
    };
}

pub(super) use recurrent_layer;
