"""Convolutional stems that run before the patch projection, written from torch.nn up.

- `ViTScratchResNetStem`: the ResNet of the paper's hybrid (section 3.1), BiT's ResNet-V2: weight-standardised
  convolutions with TensorFlow's "SAME" padding, GroupNorm with 32 groups, a 7x7 root and bottleneck stages, in the
  post-activation form of the paper's and timm's hybrids or BiT's pre-activation form.
- `ViTScratchConvStem`: the small stem of Xiao et al. 2021, "Early convolutions help transformers see better":
  3x3 convolutions of stride 2, each followed by BatchNorm and ReLU.
Both map (batch, channels, height, width) to (batch, out_channels, height / stride, width / stride) for sizes that
divide by the stride. Like the model file, this file imports only torch and its sibling configuration.
"""

import math

import torch
from torch import nn

from .configuration_vit_scratch import ViTScratchConfig

# Weight standardisation's epsilon and GroupNorm's groups and epsilon, as in BiT and the paper's hybrids.
WEIGHT_STANDARDIZATION_EPS = 1e-8
GROUP_NORM_GROUPS = 32
GROUP_NORM_EPS = 1e-5


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "SAME" padding of one axis, (before, after): the output has ceil(size / stride) positions and
    any odd pixel of padding goes after, as in the JAX/TF code the pretrained hybrids come from."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """(batch, C, H, W) padded for a "SAME" convolution or pooling with a square kernel."""
    top, bottom = same_padding(x.shape[-2], kernel, stride)
    left, right = same_padding(x.shape[-1], kernel, stride)
    return nn.functional.pad(x, (left, right, top, bottom), value=value)


class ViTScratchStemConv2d(nn.Conv2d):
    """A stem's convolution (no bias: a norm follows), a type of its own so that it gets the He initialisation of
    convolutions that feed ReLUs rather than the transformer's truncated normal."""


class ViTScratchStdConv2d(ViTScratchStemConv2d):
    """Conv2d (no bias) whose kernel is standardised per output channel (zero mean, unit variance over its
    inputs) at every call, with "SAME" padding: (batch, in, H, W) -> (batch, out, ceil(H / s), ceil(W / s))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.weight.flatten(1)  # (out, in * k * k)
        variance, mean = torch.var_mean(flat, dim=1, unbiased=False, keepdim=True)
        weight = ((flat - mean) * torch.rsqrt(variance + WEIGHT_STANDARDIZATION_EPS)).view_as(self.weight)
        kernel, stride = self.kernel_size[0], self.stride[0]
        (top, bottom), (left, right) = (same_padding(size, kernel, stride) for size in x.shape[-2:])
        if top == bottom and left == right:  # symmetric: the convolution pads, without a padded copy of x
            return nn.functional.conv2d(x, weight, None, stride, padding=(top, left))
        return nn.functional.conv2d(pad_same(x, kernel, stride), weight, None, stride)


class ViTScratchMaxPoolSame(nn.Module):
    """3x3 max pooling of stride 2 with "SAME" padding (padded with -inf, so padding never wins)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool2d(pad_same(x, 3, 2, value=-math.inf), kernel_size=3, stride=2)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GROUP_NORM_GROUPS, channels, eps=GROUP_NORM_EPS)


class ViTScratchBottleneck(nn.Module):
    """Post-activation bottleneck (the paper's and timm's hybrids): relu(x' + norm(conv(relu(norm(conv(relu(norm(
    conv(x)))))))) with x' the shortcut (a strided 1x1 conv + norm when the shape changes). The stride sits on the
    3x3 conv. (batch, in, H, W) -> (batch, out, H / stride, W / stride)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        mid = out_channels // 4
        self.conv1, self.norm1 = ViTScratchStdConv2d(in_channels, mid, 1), group_norm(mid)
        self.conv2, self.norm2 = ViTScratchStdConv2d(mid, mid, 3, stride), group_norm(mid)
        self.conv3, self.norm3 = ViTScratchStdConv2d(mid, out_channels, 1), group_norm(out_channels)
        self.activation = nn.ReLU()
        reshapes = stride != 1 or in_channels != out_channels
        self.shortcut_conv = ViTScratchStdConv2d(in_channels, out_channels, 1, stride) if reshapes else nn.Identity()
        self.shortcut_norm = group_norm(out_channels) if reshapes else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.shortcut_norm(self.shortcut_conv(x))
        x = self.activation(self.norm1(self.conv1(x)))
        x = self.activation(self.norm2(self.conv2(x)))
        return self.activation(self.norm3(self.conv3(x)) + shortcut)


class ViTScratchPreActBottleneck(nn.Module):
    """Pre-activation bottleneck (BiT, He et al. 2016): x' + conv(relu(norm(conv(relu(norm(conv(relu(norm(x)))))))))
    with x' = x, or a strided 1x1 conv of the normalised input when the shape changes. (batch, in, H, W) ->
    (batch, out, H / stride, W / stride)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        mid = out_channels // 4
        self.norm1, self.conv1 = group_norm(in_channels), ViTScratchStdConv2d(in_channels, mid, 1)
        self.norm2, self.conv2 = group_norm(mid), ViTScratchStdConv2d(mid, mid, 3, stride)
        self.norm3, self.conv3 = group_norm(mid), ViTScratchStdConv2d(mid, out_channels, 1)
        self.activation = nn.ReLU()
        reshapes = stride != 1 or in_channels != out_channels
        self.shortcut_conv = ViTScratchStdConv2d(in_channels, out_channels, 1, stride) if reshapes else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        preactivated = self.activation(self.norm1(x))
        shortcut = x if self.shortcut_conv is None else self.shortcut_conv(preactivated)
        x = self.conv1(preactivated)
        x = self.conv2(self.activation(self.norm2(x)))
        return self.conv3(self.activation(self.norm3(x))) + shortcut


class ViTScratchResNetStem(nn.Module):
    """ResNet-V2 (BiT): a 7x7 stride-2 root conv, 3x3 stride-2 max pool, then `config.stem_depths` stages of
    bottlenecks (stride 1 for the first, 2 for the others). (batch, C, H, W) -> (batch, out_channels, H / s, W / s),
    s = config.stem_stride. The pre-activation form normalises the root only after the stages, as BiT does."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        width, preactivation = config.stem_width, config.stem_preactivation
        self.root_conv = ViTScratchStdConv2d(config.num_channels, width, 7, stride=2)
        self.root_norm = nn.Identity() if preactivation else group_norm(width)
        self.root_activation = nn.Identity() if preactivation else nn.ReLU()
        self.root_pool = ViTScratchMaxPoolSame()
        block = ViTScratchPreActBottleneck if preactivation else ViTScratchBottleneck
        self.stages = nn.ModuleList()
        channels = width
        for index, depth in enumerate(config.stem_depths):
            out_channels = 4 * width * 2**index  # 256, 512, 1024, 2048 for the paper's width 64
            stage = [block(channels, out_channels, stride=2 if index else 1)]  # the stride is on the first block
            stage += [block(out_channels, out_channels, stride=1) for _ in range(depth - 1)]
            self.stages.append(nn.Sequential(*stage))
            channels = out_channels
        self.out_channels = channels
        self.final_norm = group_norm(channels) if preactivation else nn.Identity()
        self.final_activation = nn.ReLU() if preactivation else nn.Identity()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.root_pool(self.root_activation(self.root_norm(self.root_conv(pixel_values))))
        for stage in self.stages:
            x = stage(x)
        return self.final_activation(self.final_norm(x))


class ViTScratchConvStem(nn.Module):
    """Xiao et al. 2021: for each of `config.stem_channels`, a 3x3 conv of stride 2 (padding 1), BatchNorm, ReLU.
    (batch, C, H, W) -> (batch, stem_channels[-1], H / s, W / s), s = 2 ** len(stem_channels)."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        layers, channels = [], config.num_channels
        for out_channels in config.stem_channels:
            conv = ViTScratchStemConv2d(channels, out_channels, kernel_size=3, stride=2, padding=1, bias=False)
            layers += [conv, nn.BatchNorm2d(out_channels), nn.ReLU()]
            channels = out_channels
        self.layers = nn.Sequential(*layers)
        self.out_channels = channels

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.layers(pixel_values)


def build_stem(config: ViTScratchConfig) -> tuple[nn.Module, int]:
    """The stem `config.stem` names (`nn.Identity` for `"none"`) and the channels of its output."""
    if config.stem == "none":
        return nn.Identity(), config.num_channels
    stem = ViTScratchResNetStem(config) if config.stem == "resnetv2" else ViTScratchConvStem(config)
    return stem, stem.out_channels


__all__ = ["ViTScratchConvStem", "ViTScratchResNetStem", "build_stem"]
