"""The broad benchmark set's own models: plain-torch networks at realistic sizes, exported to ONNX.

``bench/compare.py --set broad`` measures these next to the onnx package's nine light models
(``ember.zoo.LIGHT_MODELS``). Each entry of ``BROAD_MODELS`` is a torch builder (seeded weights,
``eval()`` mode, batch 1); ``broad_model(name)`` exports it with torch's TorchScript ONNX exporter
(``torch.onnx.export(..., dynamo=False)``, opset 17) and caches the file on disk, so only the
first call needs torch.

| name | what it exercises | source it follows |
|---|---|---|
| ``resnext26`` | grouped 3x3 convolutions (32 groups x 4 channels), 224x224 | Xie et al. 2017 |
| ``mobilenet_v3`` | squeeze-excitation, hard-swish, depthwise 3x3/5x5, 224x224 | Howard et al. 2019 (MobileNetV3-Small) |
| ``unet`` | ConvTranspose2d up-sampling, skip Concat, 128x128, width 32 | Ronneberger et al. 2015 |
| ``vit_tiny`` | 16x16 stride-16 patch embedding, 12 pre-LN blocks, d=192 | Dosovitskiy et al. 2021 (ViT-Ti/16) |
| ``gpt2_small`` | causal decoder, 6 layers, d=512, seq 128, tied LM head (vocab 8192) | Radford et al. 2019 |
| ``distilbert`` | 6-layer post-LN encoder, d=768, seq 128, attention mask | Sanh et al. 2019 |
| ``lstm`` | embedding -> 2-layer LSTM (hidden 256), seq 64 -> linear | Hochreiter & Schmidhuber 1997 |
| ``gru`` | the same with a GRU | Cho et al. 2014 |
| ``det_head`` | conv backbone, FPN top-down path (Resize nearest x2 + Concat), 3 heads, 320x320 | Lin et al. 2017 (FPN); YOLOv3-style heads |

Vocabularies are smaller than the originals' (8192 instead of 50257/30522): the embedding is a
gather whose cost does not depend on the vocabulary, and the smaller tables keep the cached
files and the compile's memory small on a shared machine.
"""

from __future__ import annotations

import hashlib
import io
import os

import numpy as np

OPSET = 17


def _torch():
    import torch
    from torch import nn
    from torch.nn import functional as F
    return torch, nn, F


# ---------------------------------------------------------------------------------------------
# model definitions (built lazily: torch is imported only when a model is not cached)

def _resnext26(seed: int):
    from .torch_models import resnet
    return resnet(layers=(2, 2, 2, 2), width=64, image=224, classes=1000, seed=seed, groups=32,
                  expansion=2, mid=128)


def _mobilenet_v3(seed: int):
    torch, nn, F = _torch()
    from .torch_models import _seeded

    def act(kind):
        return nn.Hardswish() if kind == "hs" else nn.ReLU(True)

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            mid = max(8, (c // 4 + 4) // 8 * 8)
            self.fc1, self.fc2 = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, nl, stride):
            super().__init__()
            layers = []
            if exp != cin:
                layers += [nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), act(nl)]
            layers += [nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False),
                       nn.BatchNorm2d(exp), act(nl)]
            if se:
                layers.append(SE(exp))
            layers += [nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.body = nn.Sequential(*layers)
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.res else y

    # MobileNetV3-Small (Howard et al. 2019, table 2): k, exp, out, SE, NL, stride
    cfg = [(3, 16, 16, True, "re", 2), (3, 72, 24, False, "re", 2), (3, 88, 24, False, "re", 1),
           (5, 96, 40, True, "hs", 2), (5, 240, 40, True, "hs", 1), (5, 240, 40, True, "hs", 1),
           (5, 120, 48, True, "hs", 1), (5, 144, 48, True, "hs", 1), (5, 288, 96, True, "hs", 2),
           (5, 576, 96, True, "hs", 1), (5, 576, 96, True, "hs", 1)]

    class MobileNetV3(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            layers = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()]
            cin = 16
            for k, exp, cout, se, nl, s in cfg:
                layers.append(Block(cin, k, exp, cout, se, nl, s))
                cin = cout
            layers += [nn.Conv2d(cin, 576, 1, bias=False), nn.BatchNorm2d(576), nn.Hardswish()]
            self.features = nn.Sequential(*layers)
            self.head = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, classes))

        def forward(self, x):
            return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))

    return _seeded(MobileNetV3, seed), (torch.randn(1, 3, 224, 224),)


def _unet(seed: int):
    from .torch_models import unet
    return unet(image=128, cin=3, classes=2, w=32, seed=seed)


def _vit_tiny(seed: int):
    torch, nn, F = _torch()
    from .torch_models import _seeded

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class ViT(nn.Module):
        def __init__(self, image=224, patch=16, d=192, heads=3, layers=12, classes=1000):
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, patch)
            n = (image // patch) ** 2
            self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
            self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
            self.ln = nn.LayerNorm(d, eps=1e-6)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            return self.head(self.ln(self.blocks(x))[:, 0])

    return _seeded(ViT, seed), (torch.randn(1, 3, 224, 224),)


def _gpt2_small(seed: int):
    from .torch_models import gpt2
    return gpt2(vocab=8192, ctx=128, d=512, heads=8, layers=6, seq=128, seed=seed)


def _distilbert(seed: int):
    from .torch_models import bert
    return bert(vocab=8192, ctx=128, d=768, heads=12, layers=6, seq=128, seed=seed)


def _lstm(seed: int):
    from .torch_models import lstm_classifier
    return lstm_classifier(vocab=8192, d=128, hidden=256, classes=10, seq=64, batch=1, seed=seed)


def _gru(seed: int):
    from .torch_models import lstm_classifier
    return lstm_classifier(vocab=8192, d=128, hidden=256, classes=10, seq=64, batch=1, gru=True,
                           seed=seed)


def _det_head(seed: int):
    torch, nn, F = _torch()
    from .torch_models import _seeded

    def cbr(cin, cout, k=3, s=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout),
                             nn.LeakyReLU(0.1, True))

    class Det(nn.Module):
        """Backbone at strides 8/16/32, FPN top-down (nearest x2 Resize + Concat), 3 heads of
        3 anchors x (5 + 20 classes) channels."""

        def __init__(self, out=3 * 25):
            super().__init__()
            self.c1 = nn.Sequential(cbr(3, 16, 3, 2), cbr(16, 32, 3, 2), cbr(32, 64, 3, 2),
                                    cbr(64, 64))
            self.c2 = nn.Sequential(cbr(64, 128, 3, 2), cbr(128, 128))
            self.c3 = nn.Sequential(cbr(128, 256, 3, 2), cbr(256, 256))
            self.lat3 = cbr(256, 128, 1)
            self.top2 = nn.Sequential(cbr(128 + 128, 128, 1), cbr(128, 128))
            self.lat2 = cbr(128, 64, 1)
            self.top1 = nn.Sequential(cbr(64 + 64, 64, 1), cbr(64, 64))
            self.h1, self.h2 = nn.Conv2d(64, out, 1), nn.Conv2d(128, out, 1)
            self.h3 = nn.Conv2d(256, out, 1)

        def forward(self, x):
            p1 = self.c1(x)
            p2 = self.c2(p1)
            p3 = self.c3(p2)
            t2 = self.top2(torch.cat([F.interpolate(self.lat3(p3), scale_factor=2.0,
                                                    mode="nearest"), p2], 1))
            t1 = self.top1(torch.cat([F.interpolate(self.lat2(t2), scale_factor=2.0,
                                                    mode="nearest"), p1], 1))
            return self.h1(t1), self.h2(t2), self.h3(p3)

    return _seeded(Det, seed), (torch.randn(1, 3, 320, 320),)


BROAD_MODELS = {"resnext26": _resnext26, "mobilenet_v3": _mobilenet_v3, "unet": _unet,
                "vit_tiny": _vit_tiny, "gpt2_small": _gpt2_small, "distilbert": _distilbert,
                "lstm": _lstm, "gru": _gru, "det_head": _det_head}
"""name -> ``builder(seed) -> (torch module in eval mode, example inputs tuple)``."""


def cache_dir() -> str:
    """Where exported models are cached: ``$EMBER_CACHE_DIR/broad-models`` (else
    ``~/.cache/ember/broad-models``)."""
    base = os.environ.get("EMBER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "ember")
    return os.path.join(base, "broad-models")


def _key(name: str, seed: int) -> str:
    import inspect
    src = inspect.getsource(BROAD_MODELS[name])
    from . import torch_models
    h = hashlib.sha256((src + inspect.getsource(torch_models) + f"{seed}{OPSET}").encode())
    return h.hexdigest()[:16]


def broad_model(name: str, seed: int = 0):
    """``(onnx.ModelProto, inputs)`` of the broad-set model ``name`` (batch 1).

    The ONNX file is exported once (needs torch) and cached under ``cache_dir()``, keyed by the
    builder's source, the seed and the opset; inputs are the builder's example inputs as NumPy
    arrays (float32 images/sequences, int64 token ids and masks), stored next to it (``.npz``).

    Raises:
        KeyError: ``name`` not in ``BROAD_MODELS``.
    """
    import onnx
    if name not in BROAD_MODELS:
        raise KeyError(f"unknown broad model {name!r}; choose one of {sorted(BROAD_MODELS)}")
    d = cache_dir()
    stem = os.path.join(d, f"{name}-{_key(name, seed)}")
    if not (os.path.exists(stem + ".onnx") and os.path.exists(stem + ".npz")):
        import torch
        module, args = BROAD_MODELS[name](seed)
        names = [f"input_{i}" for i in range(len(args))]
        if name == "distilbert":
            names = ["input_ids", "attention_mask"]
        buf = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(module, args, buf, dynamo=False, input_names=names,
                              opset_version=OPSET)
        os.makedirs(d, exist_ok=True)
        tmp = f"{stem}.{os.getpid()}"
        with open(tmp + ".onnx", "wb") as f:
            f.write(buf.getvalue())
        np.savez(tmp + ".npz", **{n: a.numpy() for n, a in zip(names, args)})
        os.replace(tmp + ".npz", stem + ".npz")
        os.replace(tmp + ".onnx", stem + ".onnx")
    model = onnx.load(stem + ".onnx")
    with np.load(stem + ".npz") as z:
        inputs = {k: z[k] for k in z.files}
    return model, inputs
