"""Generated segmentation scenes and a small FPN segmentor with the module
layout of mmseg's Semantic FPN (``backbone``, ``neck``, ``decode_head``):
a dense-prediction setting ``agvm_large_batch.py`` trains on a CPU.
"""
from typing import List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

SCENE_CLASSES = ('background', 'disc', 'square', 'triangle', 'ring')


def _shape_mask(kind: int, cy: float, cx: float, radius: float,
                yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    dy, dx = yy - cy, xx - cx
    if kind == 1:
        return dy**2 + dx**2 <= radius**2
    if kind == 2:
        return (np.abs(dy) <= radius * 0.85) & (np.abs(dx) <= radius * 0.85)
    if kind == 3:  # apex up: inside the three half-planes
        return (dy >= -radius) & (dy <= radius * 0.8) & (
            np.abs(dx) <= (dy + radius) * 0.6)
    dist = np.sqrt(dy**2 + dx**2)
    return (dist <= radius) & (dist >= radius * 0.55)


def make_scenes(num: int, size: int = 32, seed: int = 0
                ) -> Tuple[Tensor, Tensor]:
    """``num`` random scenes of ``size`` pixels and their label maps.

    One to three objects (0.2-0.45 of the image across, random colours,
    later ones occluding earlier ones) on a smooth noisy background; only
    the shape tells the class. Different seeds give independent draws.

    Returns:
        tuple[Tensor, Tensor]: Images (num, 3, size, size) float32, about
        zero mean and unit variance; labels (num, size, size) int64.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    images = np.empty((num, 3, size, size), np.float32)
    labels = np.zeros((num, size, size), np.int64)
    for i in range(num):
        base = rng.uniform(-1, 1, (3, 1, 1))
        slope = rng.uniform(-1, 1, (3, 2, 1, 1)) / size
        image = base + slope[:, 0] * yy + slope[:, 1] * xx
        for _ in range(rng.integers(1, 4)):
            kind = int(rng.integers(1, len(SCENE_CLASSES)))
            radius = rng.uniform(0.1, 0.225) * size
            cy, cx = rng.uniform(radius, size - radius, 2)
            mask = _shape_mask(kind, cy, cx, radius, yy, xx)
            image[:, mask] = rng.uniform(-1.5, 1.5, (3, 1))
            labels[i][mask] = kind
        images[i] = image + rng.normal(0, 0.3, image.shape)
    return torch.from_numpy(images), torch.from_numpy(labels)


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _Backbone(nn.Module):

    def __init__(self, widths: Sequence[int]):
        super().__init__()
        self.stem = _conv_bn(3, widths[0])
        self.stages = nn.ModuleList(
            nn.Sequential(_conv_bn(widths[i], widths[i + 1], 2),
                          _conv_bn(widths[i + 1], widths[i + 1]))
            for i in range(len(widths) - 1))

    def forward(self, x: Tensor) -> List[Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats


class _Neck(nn.Module):

    def __init__(self, in_channels: Sequence[int], channels: int):
        super().__init__()
        self.laterals = nn.ModuleList(
            nn.Conv2d(c, channels, 1) for c in in_channels)

    def forward(self, feats: List[Tensor]) -> Tensor:
        x = self.laterals[-1](feats[-1])
        for lateral, feat in zip(self.laterals[-2::-1], feats[-2::-1]):
            x = lateral(feat) + F.interpolate(x, size=feat.shape[-2:])
        return x


class _DecodeHead(nn.Module):

    def __init__(self, channels: int, num_classes: int):
        super().__init__()
        self.conv = _conv_bn(channels, channels)
        self.cls = nn.Conv2d(channels, num_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.cls(self.conv(x))


class SceneSegmentor(nn.Module):
    """Backbone (BN; ``widths``: the stem's, then one per stride-2 stage),
    top-down neck and decode head (``channels`` wide), logits at input
    size."""

    def __init__(self, widths: Sequence[int] = (16, 24, 32, 48),
                 channels: int = 32,
                 num_classes: int = len(SCENE_CLASSES)):
        super().__init__()
        self.backbone = _Backbone(widths)
        self.neck = _Neck(widths[1:], channels)
        self.decode_head = _DecodeHead(channels, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        """Logits (N, num_classes, H, W) of images (N, 3, H, W)."""
        logits = self.decode_head(self.neck(self.backbone(images)))
        return F.interpolate(logits, size=images.shape[-2:],
                             mode='bilinear', align_corners=False)


def segmentation_loss(model: nn.Module, batch: Tuple[Tensor, Tensor]
                      ) -> Tensor:
    """Pixel-wise cross entropy of ``model`` on ``(images, labels)`` (the
    ``loss_fn`` form of :mod:`agvm_diagnostic`)."""
    images, labels = batch
    return F.cross_entropy(model(images), labels)


@torch.no_grad()
def mean_iou(model: nn.Module, images: Tensor, labels: Tensor,
             num_classes: int = len(SCENE_CLASSES),
             batch_size: int = 64) -> float:
    """Mean IoU over the classes present in prediction or labels
    (background included), in eval mode."""
    was_training = model.training
    model.eval()
    inter = torch.zeros(num_classes, dtype=torch.float64,
                        device=labels.device)
    union = torch.zeros_like(inter)
    for start in range(0, len(images), batch_size):
        pred = model(images[start:start + batch_size]).argmax(1)
        true = labels[start:start + batch_size]
        for c in range(num_classes):
            p, t = pred == c, true == c
            inter[c] += (p & t).sum()
            union[c] += (p | t).sum()
    model.train(was_training)
    present = union > 0
    return float((inter[present] / union[present]).mean())
