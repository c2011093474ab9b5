"""Helpers shared by the zoo's model files: seeding and deterministic weights."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with torch's CPU generator seeded, restoring the caller's state after.

    Building a model must not depend on, nor disturb, whatever the caller did
    with the global random state.
    """
    with torch.random.fork_rng(devices=()):
        torch.manual_seed(seed)
        yield


def init_weights(model: nn.Module) -> None:
    """Kaiming-uniform (ReLU gain) weights for every conv (1-D, 2-D, transposed) and linear layer.

    PyTorch's default init shrinks the signal by about sqrt(6) per ReLU layer,
    which would leave the deeper networks' outputs decided by the BatchNorm
    biases alone; the ReLU gain keeps activations near unit scale at any depth.
    Biases keep PyTorch's default (small uniform) init.
    """
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.kaiming_uniform_(module.weight, nonlinearity="relu")


def randomize_batchnorm(model: nn.Module) -> None:
    """Give every BatchNorm layer random, non-identity statistics and affine parameters.

    With freshly constructed BN (mean 0, var 1, weight 1, bias 0) folding would
    be a no-op; random values make the folded network something to check.
    Uses the current (seeded) random state.
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                n = module.num_features
                module.running_mean.copy_(0.1 * torch.randn(n))
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.copy_(0.1 * torch.randn(n))


def randomize_layernorm(model: nn.Module) -> None:
    """Random, non-identity affine parameters for every LayerNorm (scale in [0.5, 1.5], shift
    about 0.1). Uses the current (seeded) random state; draws nothing for a model without one."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm) and module.elementwise_affine:
                module.weight.uniform_(0.5, 1.5)
                module.bias.copy_(0.1 * torch.randn(module.bias.shape))


def prepare(model: nn.Module) -> nn.Module:
    """Deterministic weights and random BN and LayerNorm state for a model built under
    `seeded`; eval mode."""
    init_weights(model)
    randomize_batchnorm(model)
    randomize_layernorm(model)
    return model.eval()


def build_seeded(
    seed: int, factory: Callable[[], nn.Module], *input_shapes: tuple[int, ...], signed: bool = False
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """`factory()` prepared under `seed` (see `prepare`) and one example input per shape, drawn
    after the weights from the same generator: uniform in [0, 1) (an image), or standard normal
    if `signed` (features such as MFCCs)."""
    with seeded(seed):
        model = prepare(factory())
        draw = torch.randn if signed else torch.rand
        inputs = tuple(draw(shape) for shape in input_shapes)
    return model, inputs


def built_on_first_access(
    namespace: dict[str, object], build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) for a model file whose model is costly to build (trained
    or large): ``ModelUnderTest`` and ``ModelInputs`` are ``build()``'s result, built on their
    first access and then kept in `namespace` (the module's ``globals()``), not at import."""
    name_of_module = namespace["__name__"]

    def __getattr__(name: str) -> object:
        if name in ("ModelUnderTest", "ModelInputs"):
            model, inputs = build()
            namespace.update(ModelUnderTest=model, ModelInputs=inputs)
            return namespace[name]
        raise AttributeError(f"module {name_of_module!r} has no attribute {name!r}")

    return __getattr__
