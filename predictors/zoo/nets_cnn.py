"""Convolutional zoo models (ResNet, VGG, MobileNet V2/V3, EfficientNet-B0, ShuffleNet V2, YOLOv3).

Written from the papers' layer tables (no torchvision). CIFAR-sized inputs (32 px) use a
stride-1 stem as the usual CIFAR variants do. Blocks: stem, each residual / inverted-residual /
conv block, then the head.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dltsched.predictors.zoo.nets_base import IMAGE_DATASETS, Built, Head, conv_bn, image_classifier, register

_CNN_DATASETS = ("cifar10", "cifar100", "imagenet")


def _stem(dataset: str, cout: int, pool: bool = True) -> nn.Module:
    if IMAGE_DATASETS[dataset][1] < 64:
        return conv_bn(3, cout, 3, 1)
    mods: list[nn.Module] = [conv_bn(3, cout, 7, 2)]
    if pool:
        mods.append(nn.MaxPool2d(3, 2, 1))
    return nn.Sequential(*mods)


class Residual(nn.Module):
    """ResNet basic (expansion 1) or bottleneck (expansion 4) block."""

    def __init__(self, cin: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        cout = width * (4 if bottleneck else 1)
        if bottleneck:
            self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                      conv_bn(width, cout, 1, act=None))
        else:
            self.body = nn.Sequential(conv_bn(cin, width, 3, stride), conv_bn(width, cout, 3, act=None))
        self.short = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Body plus shortcut, then ReLU. Returns the block's output."""
        return F.relu(self.body(x) + self.short(x))


def _resnet(dataset: str, depths: tuple[int, ...], bottleneck: bool) -> Built:
    layers: list[nn.Module] = [_stem(dataset, 64)]
    cin = 64
    for stage, depth in enumerate(depths):
        width = 64 * 2**stage
        for i in range(depth):
            layers.append(Residual(cin, width, 2 if stage and not i else 1, bottleneck))
            cin = width * (4 if bottleneck else 1)
    layers.append(Head(cin, IMAGE_DATASETS[dataset][2]))
    return image_classifier(layers, dataset)


@register("resnet18", *_CNN_DATASETS)
def resnet18(dataset: str) -> Built:
    """ResNet-18: basic residual blocks, 2-2-2-2 per stage. ``dataset``: One of the image datasets the CNNs
    know (input size and classes follow it)."""
    return _resnet(dataset, (2, 2, 2, 2), False)


@register("resnet50", *_CNN_DATASETS)
def resnet50(dataset: str) -> Built:
    """ResNet-50: bottleneck residual blocks, 3-4-6-3 per stage. ``dataset``: One of the image datasets the
    CNNs know (input size and classes follow it)."""
    return _resnet(dataset, (3, 4, 6, 3), True)


@register("resnet101", *_CNN_DATASETS)
def resnet101(dataset: str) -> Built:
    """ResNet-101: bottleneck residual blocks, 3-4-23-3 per stage. ``dataset``: One of the image datasets the
    CNNs know (input size and classes follow it)."""
    return _resnet(dataset, (3, 4, 23, 3), True)


def _vgg(dataset: str, cfg: tuple[int | str, ...]) -> Built:
    layers: list[nn.Module] = []
    cin = 3
    for i, c in enumerate(cfg):
        if c == "M":
            continue
        mods: list[nn.Module] = [nn.Conv2d(cin, int(c), 3, 1, 1), nn.BatchNorm2d(int(c)), nn.ReLU()]
        if i + 1 < len(cfg) and cfg[i + 1] == "M":
            mods.append(nn.MaxPool2d(2))
        layers.append(nn.Sequential(*mods))
        cin = int(c)
    _ch, side, classes = IMAGE_DATASETS[dataset]
    if side < 64:
        layers.append(nn.Sequential(nn.Flatten(), nn.Linear(512, classes)))
    else:
        layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096),
                                    nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
                                    nn.Linear(4096, classes)))
    return image_classifier(layers, dataset)


@register("vgg16", *_CNN_DATASETS)
def vgg16(dataset: str) -> Built:
    """VGG-16: 13 3x3 convolutions in five pooled stages, then the classifier. ``dataset``: One of the image
    datasets the CNNs know (input size and classes follow it)."""
    return _vgg(dataset, (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                          512, 512, 512, "M"))


@register("vgg19", *_CNN_DATASETS)
def vgg19(dataset: str) -> Built:
    """VGG-19: 16 3x3 convolutions in five pooled stages, then the classifier. ``dataset``: One of the image
    datasets the CNNs know (input size and classes follow it)."""
    return _vgg(dataset, (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                          512, 512, 512, 512, "M"))


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: per-channel gates from globally pooled features.

    Parameters
    ----------
    c
        Channels.
    squeeze
        Channels of the bottleneck.
    gate
        The gate's activation.
    """

    def __init__(self, c: int, squeeze: int, gate: type[nn.Module] = nn.Sigmoid) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scale each channel by a gate computed from its global average. Returns the re-weighted feature
        maps."""
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNet V2/V3 and EfficientNet block: expand 1x1, depthwise kxk, optional SE, project 1x1."""

    def __init__(self, cin: int, cexp: int, cout: int, k: int, stride: int, se: int = 0,
                 act: type[nn.Module] = nn.ReLU6) -> None:
        super().__init__()
        mods: list[nn.Module] = [conv_bn(cin, cexp, 1, act=act)] if cexp != cin else []
        mods.append(conv_bn(cexp, cexp, k, stride, groups=cexp, act=act))
        if se:
            mods.append(SqueezeExcite(cexp, se))
        mods.append(conv_bn(cexp, cout, 1, act=None))
        self.body = nn.Sequential(*mods)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Expand, depthwise convolution, project; with the skip when shapes match. Returns the block's
        output."""
        y = self.body(x)
        return x + y if self.residual else y


def _stride(dataset: str, s: int, stage: int) -> int:
    """CIFAR variants keep full resolution in the first two downsampling stages."""
    return 1 if IMAGE_DATASETS[dataset][1] < 64 and stage < 2 else s


@register("mobilenet_v2", *_CNN_DATASETS)
def mobilenet_v2(dataset: str) -> Built:
    """MobileNetV2: inverted residual blocks with linear bottlenecks (ReLU6). ``dataset``: One of the image
    datasets the CNNs know (input size and classes follow it)."""
    layers: list[nn.Module] = [conv_bn(3, 32, 3, _stride(dataset, 2, 0), act=nn.ReLU6)]
    cin = 32
    table = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1))
    for stage, (t, c, n, s) in enumerate(table):
        for i in range(n):
            layers.append(InvertedResidual(cin, cin * t, c, 3, _stride(dataset, s, stage) if not i else 1))
            cin = c
    layers.append(nn.Sequential(conv_bn(cin, 1280, 1, act=nn.ReLU6), Head(1280, IMAGE_DATASETS[dataset][2])))
    return image_classifier(layers, dataset)


@register("mobilenet_v3", *_CNN_DATASETS)
def mobilenet_v3(dataset: str) -> Built:
    """MobileNetV3-Large: inverted residuals with squeeze-excite and hard-swish. ``dataset``: One of the image
    datasets the CNNs know (input size and classes follow it)."""
    hs, re = nn.Hardswish, nn.ReLU
    layers: list[nn.Module] = [conv_bn(3, 16, 3, _stride(dataset, 2, 0), act=hs)]
    table = ((3, 16, 16, 0, re, 1), (3, 64, 24, 0, re, 2), (3, 72, 24, 0, re, 1), (5, 72, 40, 24, re, 2),
             (5, 120, 40, 32, re, 1), (5, 120, 40, 32, re, 1), (3, 240, 80, 0, hs, 2), (3, 200, 80, 0, hs, 1),
             (3, 184, 80, 0, hs, 1), (3, 184, 80, 0, hs, 1), (3, 480, 112, 120, hs, 1),
             (3, 672, 112, 168, hs, 1), (5, 672, 160, 168, hs, 2), (5, 960, 160, 240, hs, 1),
             (5, 960, 160, 240, hs, 1))
    cin, stage = 16, 0
    for k, exp, cout, se, act, s in table:
        stage += s == 2
        layers.append(InvertedResidual(cin, exp, cout, k, _stride(dataset, s, stage), se, act))
        cin = cout
    layers.append(nn.Sequential(conv_bn(cin, 960, 1, act=hs),
                                Head(960, IMAGE_DATASETS[dataset][2], 1280, hs)))
    return image_classifier(layers, dataset)


@register("efficientnet_b0", *_CNN_DATASETS)
def efficientnet_b0(dataset: str) -> Built:
    """EfficientNet-B0: MBConv blocks with squeeze-excite and SiLU. ``dataset``: One of the image datasets the
    CNNs know (input size and classes follow it)."""
    layers: list[nn.Module] = [conv_bn(3, 32, 3, _stride(dataset, 2, 0), act=nn.SiLU)]
    table = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2), (6, 5, 112, 3, 1),
             (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))
    cin = 32
    for stage, (t, k, c, n, s) in enumerate(table):
        for i in range(n):
            stride = _stride(dataset, s, stage) if not i else 1
            layers.append(InvertedResidual(cin, cin * t, c, k, stride, max(1, cin // 4), nn.SiLU))
            cin = c
    layers.append(nn.Sequential(conv_bn(cin, 1280, 1, act=nn.SiLU), Head(1280, IMAGE_DATASETS[dataset][2])))
    return image_classifier(layers, dataset)


class ShuffleUnit(nn.Module):
    """ShuffleNet V2 unit: channel split (stride 1) or two branches (stride 2), then shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        bin_ = cin if stride == 2 else cin // 2
        self.branch = nn.Sequential(conv_bn(bin_, half, 1),
                                    conv_bn(half, half, 3, stride, groups=half, act=None),
                                    conv_bn(half, half, 1))
        self.left = (nn.Sequential(conv_bn(cin, cin, 3, 2, groups=cin, act=None), conv_bn(cin, half, 1))
                     if stride == 2 else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Split (or downsample) into two branches, concatenate, shuffle channels. Returns the unit's
        output."""
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch(b)), dim=1)
        else:
            out = torch.cat((self.left(x), self.branch(x)), dim=1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


@register("shufflenet_v2", *_CNN_DATASETS)
def shufflenet_v2(dataset: str) -> Built:
    """ShuffleNetV2 (1x): channel-split units with channel shuffle. ``dataset``: One of the image datasets the
    CNNs know (input size and classes follow it)."""
    layers: list[nn.Module] = [_stem(dataset, 24)]
    cin = 24
    for width, repeat in ((116, 4), (232, 8), (464, 4)):
        for i in range(repeat):
            layers.append(ShuffleUnit(cin, width, 2 if not i else 1))
            cin = width
    layers.append(nn.Sequential(conv_bn(cin, 1024, 1), Head(1024, IMAGE_DATASETS[dataset][2])))
    return image_classifier(layers, dataset)


class DarkResidual(nn.Module):
    """Darknet-53's residual block.

    Parameters
    ----------
    c
        Channels (in and out).
    """

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(c, c // 2, 1, act=nn.LeakyReLU),
                                  conv_bn(c // 2, c, 3, act=nn.LeakyReLU))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """1x1 then 3x3 convolution, added to the input. Returns the block's output."""
        return x + self.body(x)


def _dark_stage(cin: int, cout: int, repeat: int) -> nn.Sequential:
    return nn.Sequential(conv_bn(cin, cout, 3, 2, act=nn.LeakyReLU),
                         *[DarkResidual(cout) for _ in range(repeat)])


def _neck(cin: int, c: int) -> nn.Sequential:
    lrelu = nn.LeakyReLU
    return nn.Sequential(conv_bn(cin, c, 1, act=lrelu), conv_bn(c, 2 * c, 3, act=lrelu),
                         conv_bn(2 * c, c, 1, act=lrelu), conv_bn(c, 2 * c, 3, act=lrelu),
                         conv_bn(2 * c, c, 1, act=lrelu))


class YoloV3(nn.Module):
    """Darknet-53 backbone with three detection scales; the loss is an MSE proxy on the head outputs."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        out = 3 * (5 + classes)
        self.stem = conv_bn(3, 32, 3, act=nn.LeakyReLU)
        self.s1, self.s2 = _dark_stage(32, 64, 1), _dark_stage(64, 128, 2)
        self.s3, self.s4, self.s5 = _dark_stage(128, 256,
                                                8), _dark_stage(256, 512, 8), _dark_stage(512, 1024, 4)
        self.neck_l, self.neck_m, self.neck_s = _neck(1024, 512), _neck(512 + 256, 256), _neck(256 + 128, 128)
        self.out_l = nn.Sequential(conv_bn(512, 1024, 3, act=nn.LeakyReLU), nn.Conv2d(1024, out, 1))
        self.up_m = conv_bn(512, 256, 1, act=nn.LeakyReLU)
        self.out_m = nn.Sequential(conv_bn(256, 512, 3, act=nn.LeakyReLU), nn.Conv2d(512, out, 1))
        self.up_s = conv_bn(256, 128, 1, act=nn.LeakyReLU)
        self.out_s = nn.Sequential(conv_bn(128, 256, 3, act=nn.LeakyReLU), nn.Conv2d(256, out, 1))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Backbone, neck and three heads; a stand-in regression loss on each scale. Returns the training loss
        (a scalar)."""
        c3 = self.s3(self.s2(self.s1(self.stem(x))))
        c4 = self.s4(c3)
        n5 = self.neck_l(self.s5(c4))
        n4 = self.neck_m(torch.cat((F.interpolate(self.up_m(n5), scale_factor=2.0), c4), 1))
        n3 = self.neck_s(torch.cat((F.interpolate(self.up_s(n4), scale_factor=2.0), c3), 1))
        loss = self.out_l(n5).square().mean() + self.out_m(n4).square().mean()
        return loss + F.mse_loss(self.out_s(n3).mean(dim=1), target)


@register("yolov3", "pascal_voc")
def yolov3(dataset: str) -> Built:
    """YOLOv3 on 416x416 images: Darknet-53 backbone, three-scale neck and heads. ``dataset``: ``pascal_voc``
    (20 classes)."""
    side = 416

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 3, side, side), torch.randn(batch, side // 8, side // 8)

    blocks = ("stem", "s1", "s2", "s3", "s4", "s5", "neck_l", "out_l", "up_m", "neck_m", "out_m", "up_s",
              "neck_s", "out_s")
    return Built(YoloV3(20), make_inputs, blocks)
