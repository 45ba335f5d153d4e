"""An MNIST-style classifier: the forward returns logits and the loss is
given on the command line (--loss cross_entropy)."""

import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, inputs=784, hidden=128, classes=10, frozen_first=False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, classes))
        if frozen_first:
            for p in self.net[0].parameters():
                p.requires_grad_(False)

    def forward(self, x):
        return self.net(x)
