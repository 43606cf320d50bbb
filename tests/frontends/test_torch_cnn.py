"""The aten mappings of convolution, pooling and inference batch norm through
``vkumd.torch.load_exported``, against torch's own output, with no fallback to torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import vkumd.torch  # noqa: E402

nn = torch.nn


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.depthwise = nn.Conv2d(16, 16, 5, padding=2, groups=16)
        self.grouped = nn.Conv2d(16, 24, 3, padding=(1, 2), dilation=(1, 2), groups=2)
        self.avg = nn.AvgPool2d(2, stride=2, count_include_pad=False, padding=1)
        self.avg_in = nn.AvgPool2d(3, stride=1, padding=1)
        self.head = nn.Linear(24, 7)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.pool(torch.relu(self.bn(self.stem(x))))
        y = self.grouped(self.depthwise(y))
        z = self.avg(y) + 0.0
        pooled = nn.functional.adaptive_avg_pool2d(self.avg_in(y), 1).flatten(1)
        return self.head(pooled), z


@torch.no_grad()
def test_small_cnn_export(recwarn: pytest.WarningsRecorder) -> None:
    model = SmallCnn().eval()
    with torch.no_grad():  # statistics of their own, so the fold is checked
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.normal_()
    x = torch.randn(2, 3, 29, 23)
    compiled = vkumd.torch.load_exported(torch.export.export(model, (x,)))
    for i, (got, want) in enumerate(zip(compiled(x), model(x), strict=True)):
        assert got.shape == want.shape, i
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"output {i}")
    fallback = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallback, [str(w.message) for w in fallback]


class Indices(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return nn.functional.max_pool2d(x, 2, return_indices=True)


@torch.no_grad()
def test_max_pool_indices_fall_back_to_torch() -> None:
    x = torch.randn(1, 2, 6, 6)
    exported = torch.export.export(Indices(), (x,))
    with pytest.warns(vkumd.torch.VkumdFallbackWarning, match="indices"):
        compiled = vkumd.torch.load_exported(exported)
    values, indices = compiled(x)
    want_values, want_indices = Indices()(x)
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)
