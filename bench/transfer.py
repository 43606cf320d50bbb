"""Upload and read-back bandwidth against a numpy copy of the same bytes, in the same run.

Usage: python bench/transfer.py [--repeats N] [--json PATH] [--max-mib M]

Sizes run from 1 MiB to 256 MiB (or --max-mib). A size above the device's
maxStorageBufferRange cannot be a tensor; those rows copy into raw pool allocations, which
is the same path. On a unified-memory device (lavapipe) the target ratio is near 1.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import vkumd
from vkumd.runtime.memory import MemoryUsage
from vkumd.timing import median_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args()

    rows = []
    with vkumd.Context(validation=False) as ctx:
        how = ("mapped (plain memory copies)" if ctx.memory.tensors_mapped
               else "device-only (staging copies)")
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info}); tensors: {how}; "
              f"median of {args.repeats}")
        header = (f"{'size':>8} {'upload GB/s':>12} {'read-back GB/s':>15} {'numpy GB/s':>11} "
                  f"{'up/numpy':>9} {'back/numpy':>11}")
        print(header)
        print("-" * len(header))
        mib = 1
        while mib <= args.max_mib:
            nbytes = mib << 20
            host = np.random.default_rng().integers(0, 255, nbytes, dtype=np.uint8)
            dst = np.empty_like(host)
            allocation = ctx.memory.allocate(nbytes, MemoryUsage.DEVICE)
            view = memoryview(host)
            out = memoryview(dst)
            ctx.transfers.upload(allocation, view)  # touch the pages once before timing
            t_up = median_seconds(lambda a=allocation, v=view: ctx.transfers.upload(a, v),
                                  args.repeats)
            t_down = median_seconds(lambda a=allocation, o=out: ctx.transfers.download(a, o),
                                    args.repeats)
            t_np = median_seconds(lambda d=dst, h=host: np.copyto(d, h), args.repeats)
            assert np.array_equal(dst, host), "read-back differs from what was uploaded"
            ctx.memory.free(allocation)
            row = {"mib": mib, "upload_gbs": nbytes / t_up / 1e9,
                   "readback_gbs": nbytes / t_down / 1e9, "numpy_gbs": nbytes / t_np / 1e9}
            row["upload_ratio"] = row["upload_gbs"] / row["numpy_gbs"]
            row["readback_ratio"] = row["readback_gbs"] / row["numpy_gbs"]
            rows.append(row)
            print(f"{mib:>5} MiB {row['upload_gbs']:>12.2f} {row['readback_gbs']:>15.2f} "
                  f"{row['numpy_gbs']:>11.2f} {row['upload_ratio']:>9.2f} "
                  f"{row['readback_ratio']:>11.2f}")
            mib *= 4
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": ctx.caps.name, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
