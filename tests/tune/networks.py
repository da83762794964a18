"""Networks written only for the tests, loaded as `dragonlab tune --model tests/tune/networks.py:NAME`."""

import torch


def residual_mlp():
    """A two-layer MLP with a residual connection: a few small tasks (dense + ReLU, dense + add,
    the weight transposes)."""

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    torch.manual_seed(0)
    return Residual(), torch.randn(4, 16)


def eigenvalues():
    """An op TVM's Relax frontend has no converter for (torch.linalg.eigvals)."""

    class Eig(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.eigvals(x).real

    return Eig(), torch.randn(4, 4)
