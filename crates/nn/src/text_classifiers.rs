//! The baseline text classifiers over padded token ids with lengths: [`FastText`],
//! [`TextCnn`] (Kim 2014), [`BiLstmClassifier`] and [`TransformerClassifier`], their shared
//! [`TextClassifierConfig`], and the [`Conv1d`] TextCnn's filters are.
//!
//! Every model takes the inputs `ids` (`[B, T]` int64, pad id 0 past each length) and
//! `lengths` (`[B]` int64, each in `1..=T`) through [`MultiInput::forward_inputs`] and returns
//! logits `[B, num_classes]`. Each model's output for a document depends only on its first
//! `length` ids: the ids past a length are replaced by the pad id 0 before anything reads them,
//! and the layers pool over valid positions only, so a document gives the same logits alone and
//! batched beside a longer one. The keys and the default initialisation are those of the PyTorch
//! modules written in `tests/fixtures/make_text_classifiers.py`, built in the same order, so
//! their `state_dict`s load both ways.
//!
//! `forward_t` (the one-tensor form) takes the padded ids alone and recovers each length as
//! one past the last non-pad id (at least 1).

use crate::dropout::Dropout;
use crate::embedding::{Embedding, EmbeddingConfig};
use crate::embedding_bag::{EmbeddingBag, EmbeddingBagConfig, EmbeddingBagMode};
use crate::error::{NnError, Result};
use crate::init::{kaiming_uniform_, uniform_, FanMode, Nonlinearity};
use crate::inputs::{Inputs, MultiInput};
use crate::linear::Linear;
use crate::module::Module;
use crate::options::LayerOptions;
use crate::packed_sequence::pack_padded_sequence;
use crate::positional::LearnedPositionalEmbedding;
use crate::rnn::{RnnConfig, LSTM};
use crate::transformer::{TransformerEncoder, TransformerEncoderLayerConfig};
use tch::nn::ModuleT;
use tch::{Kind, Tensor};

/// The pad id of every model here (`padding_idx=0`): its embedding row starts at zero, gets no
/// gradient, and is left out of FastText's mean.
pub const PAD_ID: i64 = 0;

/// The hyperparameters of the four text classifiers; each model reads the fields it needs.
/// Defaults (`new`): `embed_dim` 128; `dropout` 0.5 (TextCnn's and the BiLSTM's dropout before
/// the classifier, Kim 2014's); `filter_sizes` `[3, 4, 5]` and `num_filters` 100 (Kim 2014);
/// `hidden_size` 128 and `lstm_layers` 1 (PyTorch's `nn.LSTM` dropout 0 between layers);
/// `nhead` 4, `encoder_layers` 2, `dim_feedforward` 512, `encoder_dropout` 0.1 (PyTorch's
/// `TransformerEncoderLayer` default) and `max_len` 512 for the transformer.
///
/// ```
/// use torchlight_nn::{TextClassifierConfig, TextCnn};
/// let config = TextClassifierConfig::new(10_000, 2).with_embed_dim(64).with_num_filters(32);
/// let model = TextCnn::new(&config);
/// # let _ = model;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TextClassifierConfig {
    /// Rows of the embedding table, the pad id 0 included.
    pub vocab_size: i64,
    /// Output classes.
    pub num_classes: i64,
    /// Token embedding width `E` (the transformer's `d_model`).
    pub embed_dim: i64,
    /// Dropout before the classifier of TextCnn and the BiLSTM, in training only.
    pub dropout: f64,
    /// TextCnn's filter widths, one `Conv1d` each.
    pub filter_sizes: Vec<i64>,
    /// TextCnn's filters per width.
    pub num_filters: i64,
    /// The BiLSTM's hidden size per direction `H`.
    pub hidden_size: i64,
    /// The BiLSTM's stacked layers.
    pub lstm_layers: i64,
    /// The transformer's attention heads (`embed_dim` divides by it).
    pub nhead: i64,
    /// The transformer's encoder layers.
    pub encoder_layers: usize,
    /// The transformer's feed-forward width.
    pub dim_feedforward: i64,
    /// The transformer's dropout inside each encoder layer.
    pub encoder_dropout: f64,
    /// The longest document the transformer's positional table covers.
    pub max_len: i64,
}

impl TextClassifierConfig {
    /// The defaults above for a vocabulary of `vocab_size` ids and `num_classes` classes.
    pub fn new(vocab_size: i64, num_classes: i64) -> Self {
        TextClassifierConfig {
            vocab_size,
            num_classes,
            embed_dim: 128,
            dropout: 0.5,
            filter_sizes: vec![3, 4, 5],
            num_filters: 100,
            hidden_size: 128,
            lstm_layers: 1,
            nhead: 4,
            encoder_layers: 2,
            dim_feedforward: 512,
            encoder_dropout: 0.1,
            max_len: 512,
        }
    }

    /// Sets `embed_dim`.
    pub fn with_embed_dim(self, embed_dim: i64) -> Self {
        TextClassifierConfig { embed_dim, ..self }
    }

    /// Sets `dropout`.
    pub fn with_dropout(self, dropout: f64) -> Self {
        TextClassifierConfig { dropout, ..self }
    }

    /// Sets `filter_sizes`.
    pub fn with_filter_sizes(self, filter_sizes: &[i64]) -> Self {
        TextClassifierConfig { filter_sizes: filter_sizes.to_vec(), ..self }
    }

    /// Sets `num_filters`.
    pub fn with_num_filters(self, num_filters: i64) -> Self {
        TextClassifierConfig { num_filters, ..self }
    }

    /// Sets `hidden_size`.
    pub fn with_hidden_size(self, hidden_size: i64) -> Self {
        TextClassifierConfig { hidden_size, ..self }
    }

    /// Sets `lstm_layers`.
    pub fn with_lstm_layers(self, lstm_layers: i64) -> Self {
        TextClassifierConfig { lstm_layers, ..self }
    }

    /// Sets `nhead`.
    pub fn with_nhead(self, nhead: i64) -> Self {
        TextClassifierConfig { nhead, ..self }
    }

    /// Sets `encoder_layers`.
    pub fn with_encoder_layers(self, encoder_layers: usize) -> Self {
        TextClassifierConfig { encoder_layers, ..self }
    }

    /// Sets `dim_feedforward`.
    pub fn with_dim_feedforward(self, dim_feedforward: i64) -> Self {
        TextClassifierConfig { dim_feedforward, ..self }
    }

    /// Sets `encoder_dropout`.
    pub fn with_encoder_dropout(self, encoder_dropout: f64) -> Self {
        TextClassifierConfig { encoder_dropout, ..self }
    }

    /// Sets `max_len`.
    pub fn with_max_len(self, max_len: i64) -> Self {
        TextClassifierConfig { max_len, ..self }
    }

    fn embedding(&self, o: LayerOptions) -> Embedding {
        Embedding::new_on(
            self.vocab_size,
            self.embed_dim,
            EmbeddingConfig::default().with_padding_idx(PAD_ID),
            o,
        )
    }
}

/// The `ids` and `lengths` of a batch, checked: ids `[B, T]` integer with `T >= 1`, lengths
/// `[B]` integer; the lengths come back as int64 on the ids' device.
fn ids_and_lengths<'a>(what: &'static str, inputs: &'a Inputs) -> Result<(&'a Tensor, Tensor)> {
    let ids = inputs.get("ids")?;
    let lengths = inputs.get("lengths")?;
    let shape = |detail: String| NnError::Shape { what, detail };
    let int = |k: Kind| matches!(k, Kind::Int64 | Kind::Int | Kind::Int16 | Kind::Int8 | Kind::Uint8);
    if ids.dim() != 2 || ids.size()[1] < 1 || !int(ids.kind()) {
        return Err(shape(format!(
            "ids must be [B, T] integers with T >= 1, got {:?} {:?}",
            ids.size(),
            ids.kind()
        )));
    }
    if lengths.size() != [ids.size()[0]] || !int(lengths.kind()) {
        return Err(shape(format!(
            "lengths must be [B] = [{}] integers, got {:?} {:?}",
            ids.size()[0],
            lengths.size(),
            lengths.kind()
        )));
    }
    Ok((ids, lengths.to_device(ids.device()).to_kind(Kind::Int64)))
}

/// `[B, T]` int64 positions `0..T` of each row of `like` (`[B, T]`), built from `like` itself
/// rather than from a size read in Rust, so that a TorchScript trace keeps `B` and `T` dynamic.
fn positions_like(like: &Tensor) -> Tensor {
    like.ones_like().cumsum(1, Kind::Int64) - 1
}

/// `[B, T]` true at the positions (`[B, T]`, from [`positions_like`]) at or past each length
/// (padding).
fn padding_mask(lengths: &Tensor, positions: &Tensor) -> Tensor {
    positions.ge_tensor(&lengths.unsqueeze(1))
}

/// `ids` `[B, T]` as int64 with every id at or past its document's length set to the pad id, so
/// nothing downstream depends on what a batch holds there.
fn clean_ids(ids: &Tensor, lengths: &Tensor) -> Tensor {
    ids.to_kind(Kind::Int64).masked_fill(&padding_mask(lengths, &positions_like(ids)), PAD_ID)
}

/// Each row's length recovered from padded `ids` `[B, T]`: one past the last non-pad id, at
/// least 1 (`forward_t`'s form).
pub fn lengths_from_padding(ids: &Tensor) -> Tensor {
    let positions = positions_like(ids) + 1;
    (ids.ne(PAD_ID).to_kind(Kind::Int64) * positions).amax([1], false).clamp_min(1)
}

/// A 1-D convolution (`torch.nn.Conv1d`, stride 1, no padding, one group): input
/// `[N, C_in, L]`, output `[N, C_out, L - kernel_size + 1]`. Keys `weight` (`[C_out, C_in, k]`)
/// and `bias` (`[C_out]`), initialised as PyTorch does: weight kaiming-uniform with
/// `a = sqrt(5)`, bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with `fan_in = C_in * k`.
#[derive(Debug, Module)]
pub struct Conv1d {
    /// `[C_out, C_in, kernel_size]`.
    #[param]
    pub weight: Tensor,
    /// `[C_out]`.
    #[param]
    pub bias: Option<Tensor>,
}

impl Conv1d {
    /// The layer with its tensors created in `options`' dtype on its device, initialised
    /// unless skipped.
    pub fn new_on(
        in_channels: i64,
        out_channels: i64,
        kernel_size: i64,
        bias: bool,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let o = options.into();
        let weight = o.param(&[out_channels, in_channels, kernel_size], |w| {
            kaiming_uniform_(w, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()))
        });
        let bound = 1.0 / ((in_channels * kernel_size) as f64).sqrt();
        let bias = bias.then(|| o.param(&[out_channels], |b| uniform_(b, -bound, bound)));
        Conv1d { weight, bias }
    }

    /// The filter width.
    pub fn kernel_size(&self) -> i64 {
        self.weight.size()[2]
    }
}

impl ModuleT for Conv1d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.conv1d(&self.weight, self.bias.as_ref(), [1], [0], [1], 1)
    }
}

/// FastText (Joulin et al. 2016) without n-grams: the mean of each document's token
/// embeddings (an `EmbeddingBag` in mean mode with `padding_idx` 0, so pad ids are left out of
/// the mean) and a linear classifier. Keys `embedding.weight` (`[vocab_size, embed_dim]`,
/// N(0, 1) with row 0 zero), `fc.weight` (`[num_classes, embed_dim]`), `fc.bias`.
#[derive(Debug, Module)]
pub struct FastText {
    /// The bag of token embeddings, mean mode.
    pub embedding: EmbeddingBag,
    /// `embed_dim -> num_classes`.
    pub fc: Linear,
}

impl FastText {
    /// A float32 CPU model initialised as PyTorch's.
    pub fn new(config: &TextClassifierConfig) -> Self {
        Self::new_on(config, LayerOptions::default())
    }

    /// The model in `options`' dtype on its device, initialised unless skipped.
    pub fn new_on(config: &TextClassifierConfig, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let bag_config =
            EmbeddingBagConfig::default().with_mode(EmbeddingBagMode::Mean).with_padding_idx(PAD_ID);
        let embedding = EmbeddingBag::new_on(config.vocab_size, config.embed_dim, bag_config, o);
        let fc = Linear::new_on(config.embed_dim, config.num_classes, true, o);
        FastText { embedding, fc }
    }

    /// Logits `[B, num_classes]` for ids `[B, T]` and lengths `[B]` (int64, on the ids'
    /// device). A document of only pad ids gets the zero mean, so `fc`'s bias.
    pub fn forward_padded(&self, ids: &Tensor, lengths: &Tensor, train: bool) -> Tensor {
        let pooled = self.embedding.forward_t(&clean_ids(ids, lengths), train);
        self.fc.forward_t(&pooled, train)
    }
}

impl ModuleT for FastText {
    fn forward_t(&self, ids: &Tensor, train: bool) -> Tensor {
        self.forward_padded(ids, &lengths_from_padding(ids), train)
    }
}

impl MultiInput for FastText {
    fn forward_inputs(&self, inputs: &Inputs, train: bool) -> Result<Tensor> {
        let (ids, lengths) = ids_and_lengths("FastText", inputs)?;
        Ok(self.forward_padded(ids, &lengths, train))
    }
}

/// Kim (2014)'s convolutional classifier: token embeddings `[B, T, E]` (`padding_idx` 0), one
/// `Conv1d(E, num_filters, k)` over time per width `k` of `filter_sizes`, ReLU, the maximum over
/// the windows that start inside the document, the widths' maxima concatenated
/// (`[B, num_filters * widths]`), dropout and a linear classifier.
///
/// A window is valid when it lies inside the document; a document shorter than a filter has
/// one window, at its start, that reads pad embeddings past its end (the ids are right-padded
/// with `widest - 1` pad ids, so every document has a window of every width, as Kim's code pads
/// short sentences), so no output depends on how far the batch is padded. The padding does not
/// depend on `T`, so a TorchScript trace of the model holds at every length. Keys `embedding.weight`, `convs.{i}.weight`
/// (`[num_filters, E, k_i]`), `convs.{i}.bias`, `fc.weight`, `fc.bias`.
#[derive(Debug, Module)]
pub struct TextCnn {
    /// Token embeddings, row 0 the pad.
    pub embedding: Embedding,
    /// One convolution per filter width, in `filter_sizes` order.
    pub convs: Vec<Conv1d>,
    /// Before the classifier (`config.dropout`).
    pub dropout: Dropout,
    /// `num_filters * filter_sizes.len() -> num_classes`.
    pub fc: Linear,
}

impl TextCnn {
    /// A float32 CPU model initialised as PyTorch's.
    ///
    /// # Panics
    /// When `filter_sizes` is empty or holds a width below 1.
    pub fn new(config: &TextClassifierConfig) -> Self {
        Self::new_on(config, LayerOptions::default())
    }

    /// The model in `options`' dtype on its device, initialised unless skipped.
    ///
    /// # Panics
    /// As [`TextCnn::new`].
    pub fn new_on(config: &TextClassifierConfig, options: impl Into<LayerOptions>) -> Self {
        assert!(
            !config.filter_sizes.is_empty() && config.filter_sizes.iter().all(|&k| k >= 1),
            "TextCnn: filter_sizes must be non-empty widths >= 1, got {:?}",
            config.filter_sizes
        );
        let o = options.into();
        let embedding = config.embedding(o);
        let convs = config
            .filter_sizes
            .iter()
            .map(|&k| Conv1d::new_on(config.embed_dim, config.num_filters, k, true, o))
            .collect();
        let features = config.num_filters * config.filter_sizes.len() as i64;
        let fc = Linear::new_on(features, config.num_classes, true, o);
        TextCnn { embedding, convs, dropout: Dropout { p: config.dropout }, fc }
    }

    /// Logits `[B, num_classes]` for ids `[B, T]` and lengths `[B]` (int64, on the ids'
    /// device, each at least 1).
    pub fn forward_padded(&self, ids: &Tensor, lengths: &Tensor, train: bool) -> Tensor {
        let widest = self.convs.iter().map(Conv1d::kernel_size).max().unwrap_or(1);
        let mut ids = clean_ids(ids, lengths);
        if widest > 1 {
            ids = ids.constant_pad_nd([0, widest - 1]);
        }
        let x = self.embedding.forward_t(&ids, train).transpose(1, 2); // [B, E, T']
        let pooled: Vec<Tensor> = self
            .convs
            .iter()
            .map(|conv| {
                let k = conv.kernel_size();
                let h = conv.forward_t(&x, train).relu(); // [B, n, T' - k + 1]
                                                          // Windows starting at or past max(length - k + 1, 1) reach past the document.
                let valid = (lengths - (k - 1)).clamp_min(1);
                let mask = padding_mask(&valid, &positions_like(&h.select(1, 0)));
                let h = h.masked_fill(&mask.unsqueeze(1), f64::NEG_INFINITY);
                h.max_dim(2, false).0
            })
            .collect();
        let features = Tensor::cat(&pooled, 1);
        self.fc.forward_t(&self.dropout.forward_t(&features, train), train)
    }
}

impl ModuleT for TextCnn {
    fn forward_t(&self, ids: &Tensor, train: bool) -> Tensor {
        self.forward_padded(ids, &lengths_from_padding(ids), train)
    }
}

impl MultiInput for TextCnn {
    fn forward_inputs(&self, inputs: &Inputs, train: bool) -> Result<Tensor> {
        let (ids, lengths) = ids_and_lengths("TextCnn", inputs)?;
        Ok(self.forward_padded(ids, &lengths, train))
    }
}

/// A bidirectional LSTM classifier: token embeddings (`padding_idx` 0), a batch-first
/// bidirectional `LSTM(E, H, lstm_layers)` run over each document's own length (the packed
/// kernels, PyTorch's `pack_padded_sequence(enforce_sorted=False)`), the last layer's final
/// forward and backward hidden states concatenated (`cat(h_n[-2], h_n[-1])`, `[B, 2H]`),
/// dropout and a linear classifier. Keys `embedding.weight`, `lstm.weight_ih_l0`, ...,
/// `lstm.bias_hh_l{L-1}_reverse`, `fc.weight` (`[num_classes, 2H]`), `fc.bias`.
#[derive(Debug, Module)]
pub struct BiLstmClassifier {
    /// Token embeddings, row 0 the pad.
    pub embedding: Embedding,
    /// Batch-first, bidirectional.
    pub lstm: LSTM,
    /// Before the classifier (`config.dropout`).
    pub dropout: Dropout,
    /// `2H -> num_classes`.
    pub fc: Linear,
}

impl BiLstmClassifier {
    /// A float32 CPU model initialised as PyTorch's.
    pub fn new(config: &TextClassifierConfig) -> Self {
        Self::new_on(config, LayerOptions::default())
    }

    /// The model in `options`' dtype on its device, initialised unless skipped.
    pub fn new_on(config: &TextClassifierConfig, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let embedding = config.embedding(o);
        let rnn = RnnConfig::default()
            .with_num_layers(config.lstm_layers)
            .with_batch_first(true)
            .with_bidirectional(true);
        let lstm = LSTM::new_on(config.embed_dim, config.hidden_size, rnn, o);
        let fc = Linear::new_on(2 * config.hidden_size, config.num_classes, true, o);
        BiLstmClassifier { embedding, lstm, dropout: Dropout { p: config.dropout }, fc }
    }

    /// Logits `[B, num_classes]` for ids `[B, T]` and lengths `[B]` (each in `1..=T`).
    ///
    /// # Panics
    /// When a length is outside `1..=T`.
    pub fn forward_padded(&self, ids: &Tensor, lengths: &Tensor, train: bool) -> Tensor {
        let x = self.embedding.forward_t(&clean_ids(ids, lengths), train);
        // The packed run and zero initial states made from `x` (not from sizes read here), and
        // no padded output, so that a TorchScript trace holds at every batch size and length.
        let packed = pack_padded_sequence(&x, lengths, true, false);
        let config = self.lstm.config();
        let states = config.num_layers * if config.bidirectional { 2 } else { 1 };
        let zeros = x.narrow(1, 0, 1).narrow(2, 0, 1).permute([1, 0, 2]).zeros_like();
        let h0 = zeros.expand([states, -1, self.lstm.hidden_size()], false).contiguous();
        let h_n = self.lstm.forward_packed(&packed, Some((&h0, &h0)), train).h_n;
        let layers = h_n.size()[0];
        let last = Tensor::cat(&[h_n.get(layers - 2), h_n.get(layers - 1)], 1);
        self.fc.forward_t(&self.dropout.forward_t(&last, train), train)
    }
}

impl ModuleT for BiLstmClassifier {
    fn forward_t(&self, ids: &Tensor, train: bool) -> Tensor {
        self.forward_padded(ids, &lengths_from_padding(ids), train)
    }
}

impl MultiInput for BiLstmClassifier {
    fn forward_inputs(&self, inputs: &Inputs, train: bool) -> Result<Tensor> {
        let (ids, lengths) = ids_and_lengths("BiLstmClassifier", inputs)?;
        Ok(self.forward_padded(ids, &lengths, train))
    }
}

/// A transformer encoder classifier: token embeddings (`padding_idx` 0) plus learned
/// positions, a batch-first post-norm `TransformerEncoder` (`encoder_layers` layers of
/// `TransformerEncoderLayer(E, nhead, dim_feedforward, encoder_dropout)`, no final norm) with
/// `src_key_padding_mask` true past each length, the mean of the encoder's outputs over the
/// valid positions (`[B, E]`) and a linear classifier. Keys `embedding.weight`,
/// `pos_embedding.weight` (`[max_len, E]`), `encoder.layers.{i}.*` (PyTorch's encoder layer
/// keys), `fc.weight`, `fc.bias`.
#[derive(Debug, Module)]
pub struct TransformerClassifier {
    /// Token embeddings, row 0 the pad.
    pub embedding: Embedding,
    /// Positions `0..T`, added to the token embeddings.
    pub pos_embedding: LearnedPositionalEmbedding,
    /// The encoder, masked at padding.
    pub encoder: TransformerEncoder,
    /// `E -> num_classes`.
    pub fc: Linear,
}

impl TransformerClassifier {
    /// A float32 CPU model initialised as PyTorch's.
    ///
    /// # Panics
    /// When `embed_dim` does not divide by `nhead`.
    pub fn new(config: &TextClassifierConfig) -> Self {
        Self::new_on(config, LayerOptions::default())
    }

    /// The model in `options`' dtype on its device, initialised unless skipped.
    ///
    /// # Panics
    /// As [`TransformerClassifier::new`].
    pub fn new_on(config: &TextClassifierConfig, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let embedding = config.embedding(o);
        let pos_embedding = LearnedPositionalEmbedding::new_on(config.max_len, config.embed_dim, o);
        let layer = TransformerEncoderLayerConfig::new(config.embed_dim, config.nhead)
            .with_dim_feedforward(config.dim_feedforward)
            .with_dropout(config.encoder_dropout)
            .build_on(o);
        let encoder = TransformerEncoder::new(layer, config.encoder_layers, None);
        let fc = Linear::new_on(config.embed_dim, config.num_classes, true, o);
        TransformerClassifier { embedding, pos_embedding, encoder, fc }
    }

    /// Logits `[B, num_classes]` for ids `[B, T]` and lengths `[B]` (each in `1..=T`).
    ///
    /// # Panics
    /// When `T` exceeds `max_len`.
    pub fn forward_padded(&self, ids: &Tensor, lengths: &Tensor, train: bool) -> Tensor {
        let x = self.embedding.forward_t(&clean_ids(ids, lengths), train);
        let x = self.pos_embedding.forward_t(&x, train);
        let mask = padding_mask(lengths, &positions_like(ids));
        let h = self.encoder.forward_masked(&x, Some(&mask), train);
        let valid = mask.logical_not().unsqueeze(-1).to_kind(h.kind());
        let kind = h.kind();
        let pooled = (h * &valid).sum_dim_intlist(1, false, kind) / valid.sum_dim_intlist(1, false, kind);
        self.fc.forward_t(&pooled, train)
    }
}

impl ModuleT for TransformerClassifier {
    fn forward_t(&self, ids: &Tensor, train: bool) -> Tensor {
        self.forward_padded(ids, &lengths_from_padding(ids), train)
    }
}

impl MultiInput for TransformerClassifier {
    fn forward_inputs(&self, inputs: &Inputs, train: bool) -> Result<Tensor> {
        let (ids, lengths) = ids_and_lengths("TransformerClassifier", inputs)?;
        Ok(self.forward_padded(ids, &lengths, train))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_recovered_from_padding_and_ids_past_them_cleared() {
        let ids = Tensor::from_slice(&[3i64, 0, 4, 0, 0, 0, 5, 6, 7]).reshape([3, 3]);
        let lengths = lengths_from_padding(&ids);
        assert_eq!(Vec::<i64>::try_from(&lengths).unwrap(), [3, 1, 3]);
        let cleaned = clean_ids(&ids, &Tensor::from_slice(&[1i64, 1, 2]));
        assert_eq!(Vec::<i64>::try_from(cleaned.flatten(0, -1)).unwrap(), [3, 0, 0, 0, 0, 0, 5, 6, 0]);
    }

    #[test]
    fn a_missing_or_misshapen_input_is_an_error() {
        let model = FastText::new(&TextClassifierConfig::new(10, 2).with_embed_dim(4));
        let ids = Tensor::from_slice(&[1i64, 2]).reshape([1, 2]);
        let err = model.forward_inputs(&Inputs::new().with("ids", ids.shallow_clone()), false).unwrap_err();
        assert!(err.to_string().contains("`lengths`"), "{err}");
        let inputs = Inputs::new().with("ids", ids).with("lengths", Tensor::from_slice(&[2i64, 2]));
        let err = model.forward_inputs(&inputs, false).unwrap_err().to_string();
        assert!(err.contains("FastText: lengths must be [B] = [1]"), "{err}");
    }
}
