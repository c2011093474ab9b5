"""digits: a small CNN trained on scikit-learn's bundled 8x8 handwritten digits.

Input 1x1x8x8 float, pixels scaled to [0, 1] (the data set's 0..16 divided by
16); output 10 logits. The data ship with scikit-learn, so nothing is
downloaded. The split (75% train, 25% test, stratified) and the training
(seeded init, seeded shuffling, Adam, on one thread) are deterministic and
take a few seconds on a CPU. The trained weights are kept in memory for the life of the
process, so later builds do not retrain; nothing is written to disk.

``ModelUnderTest`` and ``ModelInputs`` (the first test image) are built on
first access, not at import, so importing this module does not train.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from kiln.models._common import built_on_first_access, seeded

SEED = 7
SPLIT_SEED = 0
TEST_SIZE = 0.25
EPOCHS = 12
BATCH_SIZE = 32
LEARNING_RATE = 3e-3
INPUT_SHAPE = (1, 1, 8, 8)
CLASSES = 10


class DigitsCNN(nn.Module):
    """conv 3x3 1->16 + ReLU, conv 3x3/2 16->32 + ReLU, linear 512->64 + ReLU, linear 64->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.relu2 = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.conv1(x))
        x = self.relu2(self.conv2(x))
        return self.fc2(self.relu3(self.fc1(self.flatten(x))))


@functools.cache
def _splits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # scikit-learn is imported here, not at module level: importing the zoo stays cheap.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=y)
    return (
        torch.from_numpy(x_train),
        torch.from_numpy(y_train),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
    )


def train_split() -> tuple[torch.Tensor, torch.Tensor]:
    """The training images (Nx1x8x8 float in [0, 1]) and labels (N int64)."""
    x_train, y_train, _, _ = _splits()
    return x_train.clone(), y_train.clone()


def test_split() -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out test images (450x1x8x8 float in [0, 1]) and labels (450 int64)."""
    _, _, x_test, y_test = _splits()
    return x_test.clone(), y_test.clone()


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of images in `x` whose highest logit is the label in `y`."""
    with torch.no_grad():
        predicted = model(x).argmax(dim=1)
    return (predicted == y).to(torch.float64).mean().item()


@functools.cache
def _trained_state() -> dict[str, torch.Tensor]:
    x_train, y_train = train_split()
    # One thread: the order of floating-point reductions, and so the trained
    # weights bit for bit, then do not depend on the machine's core count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with seeded(SEED):
            model = DigitsCNN()
            shuffle = torch.Generator().manual_seed(SEED)
            optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
            loss_fn = nn.CrossEntropyLoss()
            model.train()
            for _ in range(EPOCHS):
                order = torch.randperm(len(x_train), generator=shuffle)
                for start in range(0, len(order), BATCH_SIZE):
                    batch = order[start : start + BATCH_SIZE]
                    optimizer.zero_grad()
                    loss = loss_fn(model(x_train[batch]), y_train[batch])
                    loss.backward()
                    optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The trained model (eval mode; trained once per process) and the first test image."""
    model = DigitsCNN()
    model.load_state_dict(_trained_state())
    model.eval()
    x_test, _ = test_split()
    return model, (x_test[:1],)


# Training happens when the model is first asked for, not at import.
__getattr__ = built_on_first_access(globals(), build)
