//! The recurrent layers `LSTM` and `GRU` (`torch.nn.LSTM`, `torch.nn.GRU`): multi-layer,
//! optionally bidirectional, over padded batches with per-sample lengths through ATen's
//! packed-sequence kernels.

use crate::init::uniform_;
use crate::module::{Module, OwnTensor, Role};
use crate::options::LayerOptions;
use crate::packed_sequence::{pack_padded_sequence, pad_packed_sequence, PackedSequence};
use std::any::Any;
use std::borrow::Cow;
use tch::Tensor;

/// Options of an [`LSTM`] or [`GRU`], with PyTorch's defaults: one layer, biases on,
/// time-major input (`batch_first` false), no dropout, one direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnnConfig {
    /// Stacked recurrent layers, each reading the previous one's output. Default 1.
    pub num_layers: i64,
    /// Whether each layer has `bias_ih` and `bias_hh`. Default `true`.
    pub bias: bool,
    /// Input and output are `[B, T, *]` instead of `[T, B, *]`; the states `h`/`c` stay
    /// `[layers * dirs, B, H]` either way, as in PyTorch. Default `false`.
    pub batch_first: bool,
    /// Dropout on each layer's output except the last, in training only (so with one layer
    /// it does nothing; PyTorch warns there). Default 0.
    pub dropout: f64,
    /// A second, reversed pass per layer whose output is concatenated to the forward one's
    /// (outputs `2 * H` wide). Default `false`.
    pub bidirectional: bool,
}

impl Default for RnnConfig {
    fn default() -> Self {
        RnnConfig { num_layers: 1, bias: true, batch_first: false, dropout: 0.0, bidirectional: false }
    }
}

impl RnnConfig {
    /// With `num_layers` stacked layers.
    pub fn with_num_layers(mut self, num_layers: i64) -> Self {
        self.num_layers = num_layers;
        self
    }
    /// With or without biases.
    pub fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }
    /// Batch-first (`[B, T, *]`) or time-major (`[T, B, *]`) input and output.
    pub fn with_batch_first(mut self, batch_first: bool) -> Self {
        self.batch_first = batch_first;
        self
    }
    /// With dropout `p` between layers in training.
    pub fn with_dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }
    /// Bidirectional or not.
    pub fn with_bidirectional(mut self, bidirectional: bool) -> Self {
        self.bidirectional = bidirectional;
        self
    }
}

/// What LSTM and GRU share: the weights in PyTorch's `_flat_weights` order with their keys,
/// the sizes and the options.
#[derive(Debug)]
struct RnnWeights {
    /// Per layer, per direction: `weight_ih_l{k}`, `weight_hh_l{k}`, then with biases
    /// `bias_ih_l{k}`, `bias_hh_l{k}`; `_reverse` appended for the reverse direction.
    weights: Vec<(String, Tensor)>,
    input_size: i64,
    hidden_size: i64,
    config: RnnConfig,
}

impl RnnWeights {
    /// `gates` is 4 for an LSTM, 3 for a GRU. Every tensor is drawn from U(-1/sqrt(H),
    /// 1/sqrt(H)) in `_flat_weights` order, as PyTorch's `reset_parameters` does, so a seeded
    /// layer equals PyTorch's.
    fn new(gates: i64, input_size: i64, hidden_size: i64, config: RnnConfig, o: LayerOptions) -> Self {
        assert!(hidden_size > 0, "hidden_size must be greater than zero, got {hidden_size}");
        assert!(config.num_layers > 0, "num_layers must be greater than zero, got {}", config.num_layers);
        assert!(
            (0.0..=1.0).contains(&config.dropout),
            "dropout should be a number in range [0, 1] representing the probability of an element being zeroed, got {}",
            config.dropout
        );
        let stdv = 1.0 / (hidden_size as f64).sqrt();
        let dirs = if config.bidirectional { 2 } else { 1 };
        let mut weights = Vec::new();
        for layer in 0..config.num_layers {
            let layer_input = if layer == 0 { input_size } else { hidden_size * dirs };
            for dir in 0..dirs {
                let suffix = if dir == 1 { "_reverse" } else { "" };
                let mut shapes = vec![
                    ("weight_ih", vec![gates * hidden_size, layer_input]),
                    ("weight_hh", vec![gates * hidden_size, hidden_size]),
                ];
                if config.bias {
                    shapes.push(("bias_ih", vec![gates * hidden_size]));
                    shapes.push(("bias_hh", vec![gates * hidden_size]));
                }
                for (name, shape) in shapes {
                    let t = o.param(&shape, |t| uniform_(t, -stdv, stdv));
                    weights.push((format!("{name}_l{layer}{suffix}"), t));
                }
            }
        }
        RnnWeights { weights, input_size, hidden_size, config }
    }

    fn directions(&self) -> i64 {
        if self.config.bidirectional {
            2
        } else {
            1
        }
    }

    fn flat(&self) -> Vec<Tensor> {
        self.weights.iter().map(|(_, t)| t.shallow_clone()).collect()
    }

    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        self.weights
            .iter()
            .map(|(name, tensor)| OwnTensor { name: Cow::Owned(name.clone()), tensor, role: Role::Parameter })
            .collect()
    }

    /// `(batch, time)` of a padded input, after checking its shape.
    fn check_input(&self, kind: &str, input: &Tensor) -> (i64, i64) {
        let size = input.size();
        assert!(
            size.len() == 3 && size[2] == self.input_size,
            "{kind}: input must be [{}, {}], got {size:?}",
            if self.config.batch_first { "B, T" } else { "T, B" },
            self.input_size
        );
        if self.config.batch_first {
            (size[0], size[1])
        } else {
            (size[1], size[0])
        }
    }

    fn check_packed(&self, kind: &str, input: &PackedSequence) {
        let size = input.data.size();
        assert!(
            size.len() == 2 && size[1] == self.input_size,
            "{kind}: packed data must be [sum(lengths), {}], got {size:?}",
            self.input_size
        );
    }

    /// A given initial state checked to be `[layers * dirs, B, H]`, or zeros of that shape.
    fn state(&self, kind: &str, what: &str, given: Option<&Tensor>, batch: i64, like: &Tensor) -> Tensor {
        let shape = [self.config.num_layers * self.directions(), batch, self.hidden_size];
        match given {
            Some(h) => {
                assert_eq!(h.size(), shape, "{kind}: {what} must be [layers * dirs, B, H] = {shape:?}");
                h.shallow_clone()
            }
            None => Tensor::zeros(shape, (like.kind(), like.device())),
        }
    }

    /// The padded output of a packed run over `input` (`[B, T, *]` or `[T, B, *]`), `T` steps
    /// long with zeros past each length.
    fn pad(&self, packed: &PackedSequence, input: &Tensor) -> Tensor {
        let total = input.size()[if self.config.batch_first { 1 } else { 0 }];
        pad_packed_sequence(packed, self.config.batch_first, 0.0, Some(total)).0
    }
}

/// A state `[layers * dirs, B, H]` in the packed batch order (`permute_hidden`).
fn permute(state: Tensor, order: Option<&Tensor>) -> Tensor {
    match order {
        Some(order) => state.index_select(1, order),
        None => state,
    }
}

/// What an [`LSTM`] returns: the output and the final states.
#[derive(Debug)]
pub struct LstmOutput<O = Tensor> {
    /// The last layer's hidden state at every step: `[B, T, H * dirs]` (batch-first) or
    /// `[T, B, H * dirs]`, zero past each sequence's length; or a [`PackedSequence`].
    pub output: O,
    /// The last valid step's hidden state of every layer and direction, `[layers * dirs, B, H]`
    /// (layer-major: `h_n[2 * k + d]` is layer `k`, direction `d`).
    pub h_n: Tensor,
    /// The cell state at the same steps, `[layers * dirs, B, H]`.
    pub c_n: Tensor,
}

/// What a [`GRU`] returns: the output and the final hidden state.
#[derive(Debug)]
pub struct GruOutput<O = Tensor> {
    /// The last layer's hidden state at every step: `[B, T, H * dirs]` (batch-first) or
    /// `[T, B, H * dirs]`, zero past each sequence's length; or a [`PackedSequence`].
    pub output: O,
    /// The last valid step's hidden state of every layer and direction, `[layers * dirs, B, H]`.
    pub h_n: Tensor,
}

/// A long short-term memory network (`torch.nn.LSTM`, without `proj_size`), with PyTorch's
/// `state_dict` keys: `weight_ih_l{k}` (`[4H, in]`, gates i, f, g, o), `weight_hh_l{k}`
/// (`[4H, H]`), `bias_ih_l{k}`, `bias_hh_l{k}` (`[4H]`), and the same with `_reverse` for
/// the reverse direction of a bidirectional layer; `in` is `input_size` for layer 0 and
/// `H * dirs` above it.
///
/// Input `[B, T, input_size]` with `batch_first`, else `[T, B, input_size]`. For padded
/// batches, [`LSTM::forward_padded`] takes per-sample lengths and runs only the valid steps
/// (PyTorch's `pack_padded_sequence(enforce_sorted=False)`, the layer, `pad_packed_sequence`),
/// so `h_n` is each sequence's state at its own last step and the reverse direction starts
/// there. `forward_t` runs every step of every sample from zero states and returns the output
/// alone.
#[derive(Debug)]
pub struct LSTM {
    core: RnnWeights,
}

impl LSTM {
    /// A float32 CPU layer initialised as PyTorch does (every tensor U(-1/sqrt(H), 1/sqrt(H)),
    /// in key order).
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is not positive or `dropout` is outside `[0, 1]`.
    pub fn new(input_size: i64, hidden_size: i64, config: RnnConfig) -> Self {
        Self::new_on(input_size, hidden_size, config, LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device, initialised
    /// unless skipped.
    ///
    /// # Panics
    /// As [`LSTM::new`].
    pub fn new_on(
        input_size: i64,
        hidden_size: i64,
        config: RnnConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        LSTM { core: RnnWeights::new(4, input_size, hidden_size, config, options.into()) }
    }

    /// `input_size`.
    pub fn input_size(&self) -> i64 {
        self.core.input_size
    }

    /// `hidden_size`, `H`.
    pub fn hidden_size(&self) -> i64 {
        self.core.hidden_size
    }

    /// The options the layer was built with.
    pub fn config(&self) -> RnnConfig {
        self.core.config
    }

    /// The weights with their keys, in PyTorch's `_flat_weights` order (the order the kernels
    /// take them and the `state_dict` lists them).
    pub fn flat_weights(&self) -> &[(String, Tensor)] {
        &self.core.weights
    }

    /// The layer over padded `input` with per-sample `lengths` (`[B]`, any order, each in
    /// `1..=T`; any integer tensor, used as CPU int64) from zero states: the output `T` steps
    /// long with zeros past each length, and each sequence's final states. Dropout between
    /// layers applies only when `train`.
    ///
    /// # Panics
    /// When `input` is not `[B, T, input_size]` (`[T, B, input_size]` time-major) or a length
    /// is out of range.
    pub fn forward_padded(&self, input: &Tensor, lengths: &Tensor, train: bool) -> LstmOutput {
        self.forward_with_state(input, Some(lengths), None, train)
    }

    /// The layer over `input`, with per-sample `lengths` as in [`LSTM::forward_padded`] or,
    /// without, every step of every sample; from initial states `(h_0, c_0)`, each
    /// `[layers * dirs, B, H]` in the caller's batch order, or zeros.
    ///
    /// # Panics
    /// As [`LSTM::forward_padded`], and when a state has another shape.
    pub fn forward_with_state(
        &self,
        input: &Tensor,
        lengths: Option<&Tensor>,
        state: Option<(&Tensor, &Tensor)>,
        train: bool,
    ) -> LstmOutput {
        let (batch, _) = self.core.check_input("LSTM", input);
        match lengths {
            Some(lengths) => {
                let packed = pack_padded_sequence(input, lengths, self.core.config.batch_first, false);
                let out = self.forward_packed(&packed, state, train);
                LstmOutput { output: self.core.pad(&out.output, input), h_n: out.h_n, c_n: out.c_n }
            }
            None => {
                let h0 = self.core.state("LSTM", "h_0", state.map(|s| s.0), batch, input);
                let c0 = self.core.state("LSTM", "c_0", state.map(|s| s.1), batch, input);
                let c = &self.core.config;
                let (output, h_n, c_n) = input.lstm(
                    &[h0, c0],
                    &self.core.flat(),
                    c.bias,
                    c.num_layers,
                    c.dropout,
                    train,
                    c.bidirectional,
                    c.batch_first,
                );
                LstmOutput { output, h_n, c_n }
            }
        }
    }

    /// The layer over a [`PackedSequence`] (PyTorch's `lstm(packed, (h_0, c_0))`): the packed
    /// output and the final states in the caller's batch order; `state` is in that order too.
    ///
    /// # Panics
    /// When the packed data is not `[sum(lengths), input_size]` or a state has another shape
    /// than `[layers * dirs, B, H]`.
    pub fn forward_packed(
        &self,
        input: &PackedSequence,
        state: Option<(&Tensor, &Tensor)>,
        train: bool,
    ) -> LstmOutput<PackedSequence> {
        self.core.check_packed("LSTM", input);
        let batch = input.batch_size();
        let sorted = input.sorted_indices.as_ref();
        let h0 = permute(self.core.state("LSTM", "h_0", state.map(|s| s.0), batch, &input.data), sorted);
        let c0 = permute(self.core.state("LSTM", "c_0", state.map(|s| s.1), batch, &input.data), sorted);
        let c = &self.core.config;
        let (data, h_n, c_n) = Tensor::lstm_data(
            &input.data,
            &input.batch_sizes,
            &[h0, c0],
            &self.core.flat(),
            c.bias,
            c.num_layers,
            c.dropout,
            train,
            c.bidirectional,
        );
        let unsorted = input.unsorted_indices.as_ref();
        LstmOutput { output: input.with_data(data), h_n: permute(h_n, unsorted), c_n: permute(c_n, unsorted) }
    }
}

impl tch::nn::ModuleT for LSTM {
    /// The output of every step from zero states (see [`LSTM::forward_with_state`]).
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_with_state(xs, None, None, train).output
    }
}

impl Module for LSTM {
    fn kind(&self) -> &'static str {
        "LSTM"
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        self.core.own_tensors()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A gated recurrent unit network (`torch.nn.GRU`), with PyTorch's `state_dict` keys:
/// `weight_ih_l{k}` (`[3H, in]`, gates r, z, n), `weight_hh_l{k}` (`[3H, H]`),
/// `bias_ih_l{k}`, `bias_hh_l{k}` (`[3H]`), and the same with `_reverse`; `in` is
/// `input_size` for layer 0 and `H * dirs` above it.
///
/// Shapes, lengths and states as for [`LSTM`], without the cell state.
#[derive(Debug)]
pub struct GRU {
    core: RnnWeights,
}

impl GRU {
    /// A float32 CPU layer initialised as PyTorch does (every tensor U(-1/sqrt(H), 1/sqrt(H)),
    /// in key order).
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is not positive or `dropout` is outside `[0, 1]`.
    pub fn new(input_size: i64, hidden_size: i64, config: RnnConfig) -> Self {
        Self::new_on(input_size, hidden_size, config, LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device, initialised
    /// unless skipped.
    ///
    /// # Panics
    /// As [`GRU::new`].
    pub fn new_on(
        input_size: i64,
        hidden_size: i64,
        config: RnnConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        GRU { core: RnnWeights::new(3, input_size, hidden_size, config, options.into()) }
    }

    /// `input_size`.
    pub fn input_size(&self) -> i64 {
        self.core.input_size
    }

    /// `hidden_size`, `H`.
    pub fn hidden_size(&self) -> i64 {
        self.core.hidden_size
    }

    /// The options the layer was built with.
    pub fn config(&self) -> RnnConfig {
        self.core.config
    }

    /// The weights with their keys, in PyTorch's `_flat_weights` order.
    pub fn flat_weights(&self) -> &[(String, Tensor)] {
        &self.core.weights
    }

    /// The layer over padded `input` with per-sample `lengths` (`[B]`, any order, each in
    /// `1..=T`) from a zero state: the output `T` steps long with zeros past each length, and
    /// each sequence's final state.
    ///
    /// # Panics
    /// When `input` is not `[B, T, input_size]` (`[T, B, input_size]` time-major) or a length
    /// is out of range.
    pub fn forward_padded(&self, input: &Tensor, lengths: &Tensor, train: bool) -> GruOutput {
        self.forward_with_state(input, Some(lengths), None, train)
    }

    /// The layer over `input`, with per-sample `lengths` or over every step, from `h_0`
    /// (`[layers * dirs, B, H]`, the caller's batch order) or zeros.
    ///
    /// # Panics
    /// As [`GRU::forward_padded`], and when `h_0` has another shape.
    pub fn forward_with_state(
        &self,
        input: &Tensor,
        lengths: Option<&Tensor>,
        h_0: Option<&Tensor>,
        train: bool,
    ) -> GruOutput {
        let (batch, _) = self.core.check_input("GRU", input);
        match lengths {
            Some(lengths) => {
                let packed = pack_padded_sequence(input, lengths, self.core.config.batch_first, false);
                let out = self.forward_packed(&packed, h_0, train);
                GruOutput { output: self.core.pad(&out.output, input), h_n: out.h_n }
            }
            None => {
                let h0 = self.core.state("GRU", "h_0", h_0, batch, input);
                let c = &self.core.config;
                let (output, h_n) = input.gru(
                    &h0,
                    &self.core.flat(),
                    c.bias,
                    c.num_layers,
                    c.dropout,
                    train,
                    c.bidirectional,
                    c.batch_first,
                );
                GruOutput { output, h_n }
            }
        }
    }

    /// The layer over a [`PackedSequence`] (PyTorch's `gru(packed, h_0)`): the packed output
    /// and the final state in the caller's batch order; `h_0` is in that order too.
    ///
    /// # Panics
    /// When the packed data is not `[sum(lengths), input_size]` or `h_0` has another shape
    /// than `[layers * dirs, B, H]`.
    pub fn forward_packed(
        &self,
        input: &PackedSequence,
        h_0: Option<&Tensor>,
        train: bool,
    ) -> GruOutput<PackedSequence> {
        self.core.check_packed("GRU", input);
        let batch = input.batch_size();
        let h0 =
            permute(self.core.state("GRU", "h_0", h_0, batch, &input.data), input.sorted_indices.as_ref());
        let c = &self.core.config;
        let (data, h_n) = Tensor::gru_data(
            &input.data,
            &input.batch_sizes,
            &h0,
            &self.core.flat(),
            c.bias,
            c.num_layers,
            c.dropout,
            train,
            c.bidirectional,
        );
        GruOutput { output: input.with_data(data), h_n: permute(h_n, input.unsorted_indices.as_ref()) }
    }
}

impl tch::nn::ModuleT for GRU {
    /// The output of every step from a zero state (see [`GRU::forward_with_state`]).
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_with_state(xs, None, None, train).output
    }
}

impl Module for GRU {
    fn kind(&self) -> &'static str {
        "GRU"
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        self.core.own_tensors()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::named_parameters;
    use tch::nn::ModuleT;
    use tch::{Device, Kind};

    #[test]
    fn keys_and_shapes_are_pytorchs() {
        let lstm = LSTM::new(3, 5, RnnConfig::default().with_num_layers(2).with_bidirectional(true));
        let named: Vec<(String, Vec<i64>)> =
            named_parameters(&lstm).into_iter().map(|(k, t)| (k, t.size())).collect();
        let expect = |k: &str, s: &[i64]| (k.to_string(), s.to_vec());
        assert_eq!(
            named,
            [
                expect("weight_ih_l0", &[20, 3]),
                expect("weight_hh_l0", &[20, 5]),
                expect("bias_ih_l0", &[20]),
                expect("bias_hh_l0", &[20]),
                expect("weight_ih_l0_reverse", &[20, 3]),
                expect("weight_hh_l0_reverse", &[20, 5]),
                expect("bias_ih_l0_reverse", &[20]),
                expect("bias_hh_l0_reverse", &[20]),
                expect("weight_ih_l1", &[20, 10]),
                expect("weight_hh_l1", &[20, 5]),
                expect("bias_ih_l1", &[20]),
                expect("bias_hh_l1", &[20]),
                expect("weight_ih_l1_reverse", &[20, 10]),
                expect("weight_hh_l1_reverse", &[20, 5]),
                expect("bias_ih_l1_reverse", &[20]),
                expect("bias_hh_l1_reverse", &[20]),
            ]
        );
        let gru = GRU::new(3, 5, RnnConfig::default().with_bias(false));
        let keys: Vec<String> = named_parameters(&gru).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["weight_ih_l0", "weight_hh_l0"]);
        assert_eq!(gru.flat_weights()[0].1.size(), [15, 3]);
    }

    #[test]
    fn init_is_within_one_over_sqrt_hidden() {
        let gru = GRU::new(4, 16, RnnConfig::default());
        for (name, t) in gru.flat_weights() {
            let max = t.abs().max().double_value(&[]);
            assert!(max <= 0.25 && max > 0.2, "{name}: |w| up to {max}, bound 1/sqrt(16)");
        }
    }

    #[test]
    fn shapes_of_outputs_and_states() {
        let cfg = RnnConfig::default().with_num_layers(2).with_bidirectional(true).with_batch_first(true);
        let lstm = LSTM::new(3, 4, cfg);
        let x = Tensor::randn([2, 6, 3], (Kind::Float, Device::Cpu));
        let out = lstm.forward_padded(&x, &Tensor::from_slice(&[2i64, 5]), false);
        assert_eq!(out.output.size(), [2, 6, 8], "[B, T, H * dirs], T the input's");
        assert_eq!(out.h_n.size(), [4, 2, 4]);
        assert_eq!(out.c_n.size(), [4, 2, 4]);
        assert_eq!(out.output.narrow(1, 5, 1).abs().max().double_value(&[]), 0.0, "zero past every length");
        assert_eq!(out.output.get(0).narrow(0, 2, 4).abs().max().double_value(&[]), 0.0);
        let gru = GRU::new(3, 4, cfg.with_batch_first(false));
        let out = gru.forward_with_state(&x.transpose(0, 1), None, None, false);
        assert_eq!(out.output.size(), [6, 2, 8]);
        assert_eq!(out.h_n.size(), [4, 2, 4]);
        assert_eq!(gru.forward_t(&x.transpose(0, 1), false).size(), [6, 2, 8]);
    }

    #[test]
    fn dropout_between_layers_applies_in_training_only() {
        let gru = GRU::new(3, 8, RnnConfig::default().with_num_layers(2).with_dropout(0.5));
        let x = Tensor::randn([5, 2, 3], (Kind::Float, Device::Cpu));
        let eval = gru.forward_t(&x, false);
        assert!(eval.equal(&gru.forward_t(&x, false)), "eval is deterministic");
        assert!(!eval.equal(&gru.forward_t(&x, true)), "training drops between the layers");
    }

    #[test]
    #[should_panic(expected = "h_0 must be [layers * dirs, B, H]")]
    fn a_state_of_the_wrong_shape_panics() {
        let gru = GRU::new(3, 4, RnnConfig::default());
        let x = Tensor::zeros([5, 2, 3], (Kind::Float, Device::Cpu));
        gru.forward_with_state(&x, None, Some(&Tensor::zeros([1, 3, 4], (Kind::Float, Device::Cpu))), false);
    }

    #[test]
    #[should_panic(expected = "LSTM: input must be [T, B, 3], got [5, 2, 4]")]
    fn input_of_the_wrong_width_panics() {
        let _ = LSTM::new(3, 4, RnnConfig::default())
            .forward_t(&Tensor::zeros([5, 2, 4], (Kind::Float, Device::Cpu)), false);
    }
}
