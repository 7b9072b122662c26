"""The PyTorch side of the text rows of `cargo xtask bench` (imported by `pytorch_bench.py`),
mirroring torchlight-bench's `text.rs`.

- `TextTrainStep`: forward over padded ids [64, T] and lengths (20..400), cross-entropy,
  backward and `torch.optim.Adam(lr=1e-3)` step, train mode, for the PyTorch modules equivalent
  to torchlight-nn's four text classifiers (the modules of
  `crates/nn/tests/fixtures/make_text_classifiers.py`, which torchlight-nn's parity tests check
  against), at the default `[text]` sizes: vocabulary 30000, 4 classes, embed_dim 128, dropout
  0.5; TextCNN widths 3, 4, 5 with 100 filters; BiLSTM hidden 128, one layer; transformer 4
  heads, feed-forward 512, 2 layers, dropout 0.1, 512 learned positions.
- `TextPipeline`: one epoch of a `Dataset` reading each `.txt` file, tokenizing it word-level
  (lower-cased, split at white space with every other non-alphanumeric character a token of its
  own, as `torchlight_text::split_words`; looked up in a vocabulary of the corpus, `[PAD]` 0 and
  `[UNK]` 1) and a `DataLoader(batch_size=64, shuffle=True, num_workers=W)` whose `collate_fn`
  cuts documents to 256 ids and pads them into ids [B, T] + lengths [B]. Word-level in plain
  Python (`text_pipeline_w*`), or (`text_pipeline_hf_w*`) with the Hugging Face `tokenizers`
  package loading the corpus's `tokenizer.json` (the WordPiece tokenizer torchlight-bench's
  `gen-text` trained, which the Torchlight side loads too), the usual way to tokenize in a
  PyTorch `Dataset` now that torchtext is discontinued.
"""

import os
import re
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

VOCAB = 30000
CLASSES = 4
BATCH = 64
MAX_LEN = 256
EMBED = 128


def padding_mask(lengths, t):
    return torch.arange(t)[None, :] >= lengths[:, None]


def clean(ids, lengths):
    return ids.masked_fill(padding_mask(lengths, ids.shape[1]), 0)


class FastText(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCAB, EMBED, mode="mean", padding_idx=0)
        self.fc = nn.Linear(EMBED, CLASSES)

    def forward(self, ids, lengths):
        return self.fc(self.embedding(clean(ids, lengths)))


class TextCNN(nn.Module):
    def __init__(self, widths=(3, 4, 5), filters=100, dropout=0.5):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.convs = nn.ModuleList([nn.Conv1d(EMBED, filters, k) for k in widths])
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(filters * len(widths), CLASSES)

    def forward(self, ids, lengths):
        ids = clean(ids, lengths)
        widest = max(c.kernel_size[0] for c in self.convs)
        ids = F.pad(ids, (0, widest - 1))
        x = self.embedding(ids).transpose(1, 2)
        pooled = []
        for conv in self.convs:
            k = conv.kernel_size[0]
            h = F.relu(conv(x))
            valid = (lengths - (k - 1)).clamp(min=1)
            h = h.masked_fill(padding_mask(valid, h.shape[2])[:, None, :], float("-inf"))
            pooled.append(h.max(dim=2).values)
        return self.fc(self.dropout(torch.cat(pooled, 1)))


class BiLSTM(nn.Module):
    def __init__(self, hidden=128, layers=1, dropout=0.5):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.lstm = nn.LSTM(EMBED, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2 * hidden, CLASSES)

    def forward(self, ids, lengths):
        x = self.embedding(clean(ids, lengths))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return self.fc(self.dropout(torch.cat([h_n[-2], h_n[-1]], 1)))


class TransformerClassifier(nn.Module):
    def __init__(self, nhead=4, ff=512, layers=2, dropout=0.1, max_len=512):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.pos_embedding = nn.Embedding(max_len, EMBED)
        layer = nn.TransformerEncoderLayer(EMBED, nhead, ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.fc = nn.Linear(EMBED, CLASSES)

    def forward(self, ids, lengths):
        t = ids.shape[1]
        x = self.embedding(clean(ids, lengths)) + self.pos_embedding(torch.arange(t))
        mask = padding_mask(lengths, t)
        h = self.encoder(x, src_key_padding_mask=mask)
        valid = (~mask).unsqueeze(-1).to(h.dtype)
        return self.fc((h * valid).sum(1) / valid.sum(1))


MODELS = {
    "train_text_fasttext_b64": FastText,
    "train_text_textcnn_b64": TextCNN,
    "train_text_bilstm_b64": BiLSTM,
    "train_text_transformer_b64": TransformerClassifier,
}


def batch_lengths():
    # The same formula as text.rs: 64 lengths spread over 20..=400.
    return [20 + (i * 7919 + 13) % 381 for i in range(BATCH)]


class TextTrainStep:
    def __init__(self, make):
        self.model = make().train()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss = nn.CrossEntropyLoss()
        lengths = torch.tensor(batch_lengths())
        torch.manual_seed(0)
        ids = torch.randint(1, VOCAB, (BATCH, int(lengths.max())))
        self.ids = clean(ids, lengths)
        self.lengths = lengths
        self.y = torch.randint(CLASSES, (BATCH,))

    def run(self):
        self.opt.zero_grad()
        loss = self.loss(self.model(self.ids, self.lengths), self.y)
        loss.backward()
        self.opt.step()


WORD = re.compile(r"[^\W_]+|\S")


def split_words(text):
    return WORD.findall(text.lower())


class TextFiles(Dataset):
    """`root/<class>/*.txt`, sorted as torchlight's TextFolder: (ids tensor, label)."""

    @staticmethod
    def files(root):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        return [
            (os.path.join(root, c, f), label)
            for label, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
            if f.endswith(".txt")
        ]

    def __init__(self, root):
        self.samples = TextFiles.files(root)
        counts = Counter()
        for path, _ in self.samples:
            with open(path, encoding="utf-8") as f:
                counts.update(split_words(f.read()))
        words = sorted(counts.items(), key=lambda x: (-x[1], x[0]))
        self.vocab = {"[PAD]": 0, "[UNK]": 1}
        for w, _ in words:
            self.vocab.setdefault(w, len(self.vocab))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        ids = [self.vocab.get(w, 1) for w in split_words(text)]
        return torch.tensor(ids, dtype=torch.int64), label


class HfTextFiles(TextFiles):
    """The same files, tokenized by the Hugging Face tokenizer at `root/tokenizer.json`
    (no padding: the collate pads)."""

    def __init__(self, root):
        from tokenizers import Tokenizer

        self.samples = TextFiles.files(root)
        self.tokenizer = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
        self.tokenizer.no_padding()

    def __getitem__(self, index):
        path, label = self.samples[index]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return torch.tensor(self.tokenizer.encode(text).ids, dtype=torch.int64), label


def pad_collate(batch):
    ids = [ids[:MAX_LEN] for ids, _ in batch]
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.int64)
    labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
    return (pad_sequence(ids, batch_first=True, padding_value=0), lengths), labels


class TextPipeline:
    def __init__(self, root, workers, dataset=TextFiles):
        self.dataset = dataset(root)
        generator = torch.Generator().manual_seed(0)
        self.loader = DataLoader(
            self.dataset,
            batch_size=BATCH,
            shuffle=True,
            num_workers=workers,
            collate_fn=pad_collate,
            generator=generator,
        )

    def run(self):
        seen = 0
        for (_ids, lengths), _labels in self.loader:
            seen += lengths.shape[0]
        assert seen == len(self.dataset), seen


def build(name, corpus):
    """The text workload `name`, or None when it is not a text row."""
    if name in MODELS:
        return TextTrainStep(MODELS[name])
    if name == "text_pipeline_w0":
        return TextPipeline(corpus, 0)
    if name == "text_pipeline_w2":
        return TextPipeline(corpus, 2)
    if name == "text_pipeline_hf_w0":
        return TextPipeline(corpus, 0, HfTextFiles)
    if name == "text_pipeline_hf_w2":
        return TextPipeline(corpus, 2, HfTextFiles)
    return None
