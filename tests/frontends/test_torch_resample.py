"""The aten mappings of resize, pad and transposed convolution through
``vkumd.torch.load_exported``, against torch's own output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import vkumd.torch  # noqa: E402

F = torch.nn.functional


class Resample(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0),
                                           output_padding=(1, 2), groups=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.up(x)
        return (y,
                F.interpolate(y, scale_factor=2.0, mode="nearest"),
                F.interpolate(x, size=(9, 13), mode="nearest"),
                F.interpolate(x, size=(4, 11), mode="bilinear", align_corners=False),
                F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                F.interpolate(x, size=(11, 4), mode="bicubic", align_corners=False),
                F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=True),
                F.pad(x, (1, 2, 0, 3), value=-1.5),
                F.pad(x, (2, 1, 1, 2), mode="reflect"),
                F.pad(x, (0, 3, 2, 0), mode="replicate"))


@torch.no_grad()
def test_resample_export(recwarn: pytest.WarningsRecorder) -> None:
    model = Resample().eval()
    x = torch.randn(2, 4, 5, 7)
    compiled = vkumd.torch.load_exported(torch.export.export(model, (x,)))
    for i, (got, want) in enumerate(zip(compiled(x), model(x), strict=True)):
        assert got.shape == want.shape, i
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"output {i}")
    fallback = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallback, [str(w.message) for w in fallback]


class GridSample(torch.nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor, volume: torch.Tensor,
                grid3: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                              align_corners=False),
                F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection",
                              align_corners=True),
                F.grid_sample(x, grid, mode="nearest", padding_mode="border",
                              align_corners=False),
                F.grid_sample(x, grid, mode="bicubic", padding_mode="zeros",
                              align_corners=True),
                F.grid_sample(volume, grid3, mode="bilinear", padding_mode="border",
                              align_corners=False))


@torch.no_grad()
def test_grid_sample_export(recwarn: pytest.WarningsRecorder) -> None:
    model = GridSample().eval()
    args = (torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 3 - 1.5,
            torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 3 - 1.5)
    compiled = vkumd.torch.load_exported(torch.export.export(model, args))
    for i, (got, want) in enumerate(zip(compiled(*args), model(*args), strict=True)):
        assert got.shape == want.shape, i
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"output {i}")
    fallback = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallback, [str(w.message) for w in fallback]
