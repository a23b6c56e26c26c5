"""A VGG-like network sized for the enforcement benchmark on a small machine.

VGG-16's layer structure (3×3 conv stacks with max-pooling, then two large fully
connected layers) at 64×64 input and reduced widths: 8,806,692 parameters
(35 MB in float32), about a fifteenth of VGG-16's 528 MB, so one server and two
workers fit in a few GB and a 1 Gbit/s link carries one worker's copy in ~0.28 s.
Like VGG, most bytes sit in the late layers and the first layers' weights are
tiny, which is what makes the transfer order matter.
"""
from __future__ import annotations

import torch
from torch import nn

CFG = (32, "M", 64, "M", 128, 128, "M", 256, 256, "M", 256, 256, "M")


class VGGMid(nn.Module):
    def __init__(self, num_classes: int = 100):
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for v in CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
                c = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(256 * 2 * 2, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                                        nn.Linear(2048, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def vgg_mid(batch: int = 8):
    torch.manual_seed(0)
    return VGGMid().eval(), (torch.randn(batch, 3, 64, 64),)
