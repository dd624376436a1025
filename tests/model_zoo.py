"""Real architectures built from torch.nn alone (torchvision and timm do not load beside the CPU torch here).

``resnet_like`` has resnet18's structure (stem, BasicBlocks with a downsample,
a ``flatten`` in the model's own ``forward``, ``fc``); ``gpt_like`` has
GPT-2's module tree (``transformer.wte``, ``transformer.h.N`` blocks with
``attn``/``mlp``, ``transformer.ln_f``, ``lm_head``).
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.downsample = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNetLike(nn.Module):
    def __init__(self, width: int = 4, classes: int = 3, stages: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.stages = stages
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        for stage in range(2, stages + 1):  # resnet18: four stages, each doubling the width
            inputs, outputs = width * 2 ** (stage - 2), width * 2 ** (stage - 1)
            self.add_module(f"layer{stage}", nn.Sequential(BasicBlock(inputs, outputs, 2), BasicBlock(outputs, outputs)))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 2 ** (stages - 1), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        for stage in range(1, self.stages + 1):
            x = getattr(self, f"layer{stage}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))  # flatten: made by the model's own forward


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return self.c_proj(weights @ v)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTLike(nn.Module):
    def __init__(self, vocabulary: int = 11, width: int = 8, blocks: int = 3) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocabulary, width),
                "wpe": nn.Embedding(16, width),
                "h": nn.ModuleList(Block(width) for _ in range(blocks)),
                "ln_f": nn.LayerNorm(width),
            }
        )
        self.lm_head = nn.Linear(width, vocabulary, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[-1])
        x = self.transformer["wte"](tokens) + self.transformer["wpe"](positions)
        for block in self.transformer["h"]:
            x = block(x)
        return self.lm_head(self.transformer["ln_f"](x))


def resnet_like() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return ResNetLike(), torch.randn(2, 3, 8, 8)


def gpt_like() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return GPTLike(), torch.randint(0, 11, (2, 5))


def resnet18_like() -> tuple[nn.Module, torch.Tensor]:
    """resnet18's full structure: the stem, four stages of two BasicBlocks (133 graph nodes)."""
    torch.manual_seed(0)
    return ResNetLike(stages=4), torch.randn(2, 3, 16, 16)


def gpt2_like() -> tuple[nn.Module, torch.Tensor]:
    """GPT-2's twelve blocks (603 graph nodes)."""
    torch.manual_seed(0)
    return GPTLike(blocks=12), torch.randint(0, 11, (2, 5))


def encoder12() -> tuple[nn.Module, torch.Tensor]:
    """A 12-layer ``nn.TransformerEncoder`` (625 graph nodes)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False), torch.randn(3, 2, 8)


ZOO = {"resnet_like": resnet_like, "gpt_like": gpt_like}
#: The models the static picture's size is measured on (issue 24: readable at 1:1).
REAL_MODELS = {"resnet18": resnet18_like, "gpt2": gpt2_like, "encoder12": encoder12}
