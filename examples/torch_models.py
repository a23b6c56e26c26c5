"""Example PyTorch networks, written here so dlsched needs no torchvision.

Each factory takes an optional ``batch`` and returns ``(module, example_inputs)``,
the contract of dlsched's MODEL argument ``examples/torch_models.py:resnet50``.
Weights are randomly initialised with a fixed seed; nothing is downloaded.

- ``resnet50``: ResNet-50 v1.5 (torchvision layout, 25,557,032 parameters)
- ``resnet18``: ResNet-18 (torchvision layout, BasicBlock, 11,689,512 parameters)
- ``vgg16``: VGG-16 (configuration D, 138,357,544 parameters)
- ``transformer``: a 4-layer transformer encoder classifier over token ids
- ``small_cnn``: a 4-layer CNN for quick tests
- ``alexnet``: AlexNet (one tower; its layers named as in
  ``examples/alexnet_algorithms.csv``, paper 003's Fig. 2 model)
"""
from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=False)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class BasicBlock(nn.Module):
    """ResNet-18/34's block: two 3×3 convolutions and the identity (or a 1×1 projection when the shape changes)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=False)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    block = Bottleneck

    def __init__(self, num_classes: int = 1000, layers=(3, 4, 6, 3)):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=False)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * self.block.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        block, downsample = self.block, None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ResNet18(ResNet50):
    """torchvision's ``resnet18`` layout: BasicBlocks, two per stage."""

    block = BasicBlock

    def __init__(self, num_classes: int = 1000):
        super().__init__(num_classes, layers=(2, 2, 2, 2))


class VGG16(nn.Module):
    CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=False)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=False), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(inplace=False), nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer written out op by op (no fused kernels),
    so every matmul shows up as its own node in fx, ONNX and the profiler."""

    def __init__(self, d_model: int, heads: int, d_ff: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.act = nn.GELU()

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) * (d // h) ** -0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.ff2(self.act(self.ff1(self.norm2(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, vocab: int = 8000, d_model: int = 256, heads: int = 4, d_ff: int = 1024,
                 layers: int = 4, seq_len: int = 64, num_classes: int = 10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        self.layers = nn.ModuleList(EncoderLayer(d_model, heads, d_ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(dim=1))


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()
        self.fc1 = nn.Linear(128 * 4 * 4, 256)
        self.fc2 = nn.Linear(256, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.pool(self.relu(self.conv3(x)))
        return self.fc2(self.relu(self.fc1(torch.flatten(x, 1))))


class SmallCNNGAP(nn.Module):
    """Four convolutions on 32×32 images and global average pooling: a small CNN whose compute
    dominates its parameters (103k, 0.4 MB; ``SmallCNN`` has 620k and half the compute per sample)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv4 = nn.Conv2d(64, 128, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.pool(self.relu(self.conv3(x)))
        x = self.relu(self.conv4(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class AlexNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 11, stride=4, padding=2)
        self.conv2 = nn.Conv2d(64, 192, 5, padding=2)
        self.conv3 = nn.Conv2d(192, 384, 3, padding=1)
        self.conv4 = nn.Conv2d(384, 256, 3, padding=1)
        self.conv5 = nn.Conv2d(256, 256, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2)
        self.relu = nn.ReLU()
        # torchvision's layout (PARAM's AlexNet benchmark runs it): a 6×6 average pool, a no-op on 224×224
        # images, and dropout before fc6 and fc7, identities in eval mode; each runs a kernel on a GPU.
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.drop6 = nn.Dropout(0.5)
        self.drop7 = nn.Dropout(0.5)
        self.fc6 = nn.Linear(256 * 6 * 6, 4096)
        self.fc7 = nn.Linear(4096, 4096)
        self.fc8 = nn.Linear(4096, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.pool(self.relu(self.conv5(self.relu(self.conv4(self.relu(self.conv3(x)))))))
        x = torch.flatten(self.avgpool(x), 1)
        x = self.relu(self.fc6(self.drop6(x)))
        return self.fc8(self.relu(self.fc7(self.drop7(x))))


class RNNClassifier(nn.Module):
    """A 2-layer recurrent classifier over sequences of 32 features; the last step's state gives 10 logits."""

    def __init__(self, cell, bidirectional: bool = False):
        super().__init__()
        self.rnn = cell(32, 64, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(64 * (2 if bidirectional else 1), 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _seeded(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


def resnet50(batch: int = 8):
    """ResNet-50 on 224×224 images."""
    return _seeded(ResNet50), (torch.randn(batch, 3, 224, 224),)


def resnet18(batch: int = 8):
    """ResNet-18 on 224×224 images (11,689,512 parameters; the public ROCm DDP trace ran it at batch 10)."""
    return _seeded(ResNet18), (torch.randn(batch, 3, 224, 224),)


def vgg16(batch: int = 8):
    """VGG-16 on 224×224 images (the TicTac paper's 138,357,544-parameter model)."""
    return _seeded(VGG16), (torch.randn(batch, 3, 224, 224),)


def transformer(batch: int = 8, seq_len: int = 64):
    """A 4-layer transformer encoder classifier on sequences of 64 token ids."""
    g = torch.Generator().manual_seed(1)
    return _seeded(TransformerEncoder, seq_len=seq_len), (torch.randint(0, 8000, (batch, seq_len), generator=g),)


def small_cnn(batch: int = 32):
    """A 4-layer CNN on 32×32 images, for quick tests."""
    return _seeded(SmallCNN), (torch.randn(batch, 3, 32, 32),)


def small_cnn_gap(batch: int = 32):
    """A small CNN on 32×32 images whose per-sample compute dominates its transfers (LB-BSP benchmark)."""
    return _seeded(SmallCNNGAP), (torch.randn(batch, 3, 32, 32),)


def alexnet(batch: int = 8, num_classes: int = 1000):
    """AlexNet on 224×224 images (61,100,840 parameters with 1,000 classes)."""
    return _seeded(AlexNet, num_classes), (torch.randn(batch, 3, 224, 224),)


def lstm(batch: int = 16, seq_len: int = 20):
    """A 2-layer LSTM classifier (eager-SGD §7.3 trains an LSTM) on sequences of 20 steps."""
    return _seeded(RNNClassifier, nn.LSTM), (torch.randn(batch, seq_len, 32),)


def gru_bidirectional(batch: int = 16, seq_len: int = 20):
    """A 2-layer bidirectional GRU classifier on sequences of 20 steps."""
    return _seeded(RNNClassifier, nn.GRU, bidirectional=True), (torch.randn(batch, seq_len, 32),)


FACTORIES = {"resnet50": resnet50, "resnet18": resnet18,
             "vgg16": vgg16, "transformer": transformer, "small_cnn": small_cnn,
             "small_cnn_gap": small_cnn_gap,
             "alexnet": alexnet, "lstm": lstm, "gru_bidirectional": gru_bidirectional}
