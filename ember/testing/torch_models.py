"""Plain-torch model builders for the PyTorch frontend's tests and benchmark (needs ``torch``).

Each builder returns ``(module, example_inputs)`` with the module in ``eval()`` mode and seeded
weights (``torch.manual_seed``). No torchvision: every layer is written with ``torch.nn``.

- ``resnet``: ResNet-style CNN (He et al. 2016): bottleneck blocks, batch norm, max pool,
  adaptive average pool, linear head. ``resnet(layers=(3, 4, 6, 3), width=64, image=224)`` is
  ResNet-50-shaped.
- ``se_mobilenet``: depthwise-separable blocks with squeeze-excitation (Hu et al. 2018),
  SiLU/hard-sigmoid, grouped convolutions.
- ``gpt2``: GPT-2-style decoder (Radford et al. 2019): token + position embeddings, causal
  ``scaled_dot_product_attention``, pre-LN blocks, GELU(tanh) MLP, tied LM head.
- ``bert``: BERT-style encoder (Devlin et al. 2019) with an attention mask input: post-LN blocks,
  GELU MLP, explicit softmax attention with the additive mask. ``bert(layers=12, hidden=768,
  heads=12, seq=128)`` is BERT-base-shaped.
- ``lstm_classifier``: embedding -> 2-layer ``nn.LSTM`` (batch_first) -> linear on the last
  step; ``gru=True`` uses ``nn.GRU``.
- ``unet``: a two-level UNet (Ronneberger et al. 2015) with ``ConvTranspose2d`` up-sampling and
  skip ``cat``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _seeded(build, seed: int):
    torch.manual_seed(seed)
    m = build()
    for mod in m.modules():  # non-trivial batch-norm statistics
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            nn.init.uniform_(mod.weight, 0.5, 1.5)
            nn.init.uniform_(mod.bias, -0.2, 0.2)
    return m.eval()


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride, ``groups``: ResNeXt's cardinality) -> 1x1 (``mid * expansion``
    channels) with batch norm, ReLU (in place) and a projection shortcut."""

    def __init__(self, cin: int, mid: int, stride: int, groups: int = 1, expansion: int = 4):
        super().__init__()
        cout = mid * expansion
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        y += idt
        return self.relu(y)


class ResNet(nn.Module):
    def __init__(self, layers, width: int, classes: int, groups: int = 1, expansion: int = 4,
                 mid: int | None = None):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, n in enumerate(layers):
            m = (mid or width) * 2 ** i
            for j in range(n):
                blocks.append(Bottleneck(cin, m, 2 if (j == 0 and i > 0) else 1, groups,
                                         expansion))
                cin = m * expansion
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def resnet(layers=(1, 1), width: int = 8, image: int = 32, classes: int = 10, batch: int = 1,
           seed: int = 0, groups: int = 1, expansion: int = 4, mid: int | None = None):
    """ResNet-style CNN; ``x`` float32 ``(batch, 3, image, image)`` -> logits ``(batch, classes)``.
    ``groups``/``expansion``/``mid`` (first stage's bottleneck width, default ``width``) make it
    a ResNeXt (Xie et al. 2017): ``groups=32, expansion=2, mid=128`` is 32x4d."""
    m = _seeded(lambda: ResNet(layers, width, classes, groups, expansion, mid), seed)
    return m, (torch.randn(batch, 3, image, image),)


class SEBlock(nn.Module):
    """Depthwise 3x3 -> squeeze-excitation -> pointwise 1x1, residual when shapes agree."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int = 2):
        super().__init__()
        mid = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                    nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                                nn.BatchNorm2d(mid), nn.SiLU())
        self.se_reduce = nn.Conv2d(mid, max(mid // 4, 1), 1)
        self.se_expand = nn.Conv2d(max(mid // 4, 1), mid, 1)
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, groups=2 if cout % 2 == 0 and
                                               mid % 2 == 0 else 1, bias=False),
                                     nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.dw(self.expand(x))
        s = F.adaptive_avg_pool2d(y, 1)
        s = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        y = self.project(y * s)
        return x + y if self.residual else y


class SEMobileNet(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(SEBlock(8, 8, 1), SEBlock(8, 16, 2), SEBlock(16, 16, 1))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        y = F.avg_pool2d(y, 2)
        y = F.max_pool2d(y, 2, ceil_mode=True)
        return self.head(y.mean((2, 3)))


def se_mobilenet(image: int = 32, classes: int = 10, batch: int = 1, seed: int = 0):
    """Depthwise / squeeze-excitation CNN; ``x`` ``(batch, 3, image, image)`` -> ``(batch, classes)``."""
    m = _seeded(lambda: SEMobileNet(classes), seed)
    return m, (torch.randn(batch, 3, image, image),)


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, heads: int, layers: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(GPT2Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("pos", torch.arange(ctx), persistent=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(self.pos[: ids.shape[1]])
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2(vocab: int = 64, ctx: int = 16, d: int = 32, heads: int = 4, layers: int = 2,
         seq: int = 8, batch: int = 1, seed: int = 0):
    """GPT-2-style decoder; ``ids`` int64 ``(batch, seq)`` -> logits ``(batch, seq, vocab)``."""
    m = _seeded(lambda: GPT2(vocab, ctx, d, heads, layers), seed)
    g = torch.Generator().manual_seed(seed + 1)
    return m, (torch.randint(0, vocab, (batch, seq), generator=g),)


class BertLayer(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, bias):
        b, t, d = x.shape
        h = self.heads

        def split(z):
            return z.reshape(b, t, h, d // h).permute(0, 2, 1, 3)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // h) + bias
        a = torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids)))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


def bert(vocab: int = 64, ctx: int = 32, d: int = 32, heads: int = 4, layers: int = 2,
         seq: int = 8, batch: int = 1, seed: int = 0):
    """BERT-style encoder; ``input_ids`` int64 ``(batch, seq)``, ``attention_mask`` int64
    ``(batch, seq)`` (last quarter masked) -> hidden ``(batch, seq, d)``, pooled ``(batch, d)``."""
    m = _seeded(lambda: Bert(vocab, ctx, d, heads, layers), seed)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[:, seq - max(seq // 4, 1):] = 0
    return m, (ids, mask)


class LSTMClassifier(nn.Module):
    def __init__(self, vocab: int, d: int, hidden: int, classes: int, gru: bool):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        rnn = nn.GRU if gru else nn.LSTM
        self.rnn = rnn(d, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.head(y[:, -1])


def lstm_classifier(vocab: int = 50, d: int = 16, hidden: int = 24, classes: int = 5,
                    seq: int = 6, batch: int = 2, gru: bool = False, seed: int = 0):
    """Embedding -> 2-layer LSTM (or GRU) -> linear; ``ids`` int64 ``(batch, seq)`` ->
    ``(batch, classes)``."""
    m = _seeded(lambda: LSTMClassifier(vocab, d, hidden, classes, gru), seed)
    g = torch.Generator().manual_seed(seed + 1)
    return m, (torch.randint(0, vocab, (batch, seq), generator=g),)


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                         nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, cin: int, classes: int, w: int):
        super().__init__()
        self.d1, self.d2 = _double_conv(cin, w), _double_conv(w, 2 * w)
        self.mid = _double_conv(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.u2 = _double_conv(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 3, stride=2, padding=1, output_padding=1)
        self.u1 = _double_conv(2 * w, w)
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.mid(F.max_pool2d(b, 2))
        y = self.u2(torch.cat([self.up2(c), b], dim=1))
        y = self.u1(torch.cat([self.up1(y), a], dim=1))
        return self.out(y)


def unet(image: int = 16, cin: int = 3, classes: int = 2, w: int = 4, batch: int = 1,
         seed: int = 0):
    """Two-level UNet with ConvTranspose2d; ``x`` ``(batch, cin, image, image)`` ->
    ``(batch, classes, image, image)``."""
    m = _seeded(lambda: UNet(cin, classes, w), seed)
    return m, (torch.randn(batch, cin, image, image),)


def gru_classifier(**kw):
    """``lstm_classifier(gru=True, ...)``: embedding -> 2-layer ``nn.GRU`` -> linear."""
    return lstm_classifier(gru=True, **kw)


MODELS = {"resnet": resnet, "se_mobilenet": se_mobilenet, "gpt2": gpt2, "bert": bert,
          "lstm": lstm_classifier, "gru": gru_classifier, "unet": unet}
