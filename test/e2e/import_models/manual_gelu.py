"""GELUs written out by hand, as minGPT (tanh) and older Hugging Face code
(erf) do, in a small regression model whose loss is its own mean squared
error."""

import math

import torch
import torch.nn as nn


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))


class ErfGELU(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Regressor(nn.Module):
    def __init__(self, inputs=12, hidden=32, outputs=3):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.act1 = NewGELU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = ErfGELU()
        self.fc3 = nn.Linear(hidden, outputs)

    def forward(self, x, y):
        out = self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))
        return ((out - y) ** 2).mean()
