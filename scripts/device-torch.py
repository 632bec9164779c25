#!/usr/bin/env python3
"""Baselines for scripts/device-check.sh: torch.matmul bf16 TFLOP/s on the shapes the CUDA bench
uses (x [n, k] @ w[out, k].T, both bf16 as torch runs them), and torch's device copy bandwidth.
Writes JSON to the path given as the first argument. Needs PyTorch with CUDA."""
import json
import sys

import torch

SHAPES = [(4096, 4096, 4096), (4096, 4096, 14336), (4096, 14336, 4096), (2048, 4096, 6144)]


def time_ms(fn, iters):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    out_path = sys.argv[1]
    dev = torch.device("cuda")
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "matmul": []}
    for n, k, o in SHAPES:
        x = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(o, k, device=dev, dtype=torch.bfloat16)
        ms = time_ms(lambda: torch.matmul(x, w.t()), 20)
        results["matmul"].append({"n": n, "k": k, "out": o, "ms": ms, "tflops": 2 * n * k * o / (ms / 1e3) / 1e12})
        print(f"torch.matmul bf16 [{n}x{k}]x[{o}x{k}]^T: {results['matmul'][-1]['tflops']:.1f} TFLOP/s")
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), 20)
    results["copyGBps"] = 2 * src.numel() / (ms / 1e3) / 1e9
    print(f"torch copy: {results['copyGBps']:.0f} GB/s")
    with open(out_path, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
