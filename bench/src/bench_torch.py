#!/usr/bin/env python3
"""PyTorch benchmarks for Flyt: run natively and through flyt-run by
bench/run_bench.sh, which merges the RESULT lines into its table.

Measurements (ms per step or per batch; median over timed batches of several
steps, after warm-up steps; each batch ends with torch.cuda.synchronize()):
  torch_train_mlp_b64        MLP training step (forward, backward, SGD), batch 64
  torch_train_mlp_b64_item   the same with loss.item() every step (a sync per step)
  torch_train_cnn_b64        small CNN training step (Adam), 3x32x32 inputs, batch 64
  torch_infer_resnet_b64     ResNet-like model (8 residual blocks) inference under
                             no_grad, 3x32x32 inputs, batch 64

Output: '# ...' comment lines and 'RESULT <name> <value> <unit>' lines.
Options: --quick (fewer steps; also FLYT_BENCH_QUICK=1), --batches K,
--filter A,B (names containing A or B); other arguments are ignored (the
runner passes the same extra arguments to every program).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.c3 = nn.Conv2d(64, 128, 3, padding=1)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm2d(32), nn.BatchNorm2d(64), nn.BatchNorm2d(128)
        self.fc = nn.Linear(128 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.c2(x))), 2)
        x = F.max_pool2d(F.relu(self.bn3(self.c3(x))), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class ResNetSmall(nn.Module):
    """ResNet-18-like layout at CIFAR scale: 4 stages of 2 blocks."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        layers, cin = [], 32
        for cout, stride in ((32, 1), (64, 2), (128, 2), (256, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def measure(step, warmup, steps, batches):
    """Median ms per step over `batches` timed batches of `steps` steps."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - t0) * 1e3 / steps)
    return statistics.median(per_step)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", default=os.environ.get("FLYT_BENCH_QUICK", "0") not in ("", "0"))
    ap.add_argument("--batches", type=int, default=int(os.environ.get("FLYT_BENCH_BATCHES", "0") or 0))
    ap.add_argument("--filter", default=os.environ.get("FLYT_BENCH_FILTER", ""))
    args, ignored = ap.parse_known_args()
    if not torch.cuda.is_available():
        print("error: torch.cuda.is_available() is False", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    warmup, steps, batches = (5, 10, 5) if args.quick else (20, 20, 11)
    if args.batches > 0:
        batches = args.batches
    filters = [f for f in args.filter.split(",") if f]
    torch.backends.cudnn.benchmark = False  # the same algorithms natively and through Flyt
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"warm-up {warmup} steps, {batches} batches of {steps} steps")
    if ignored:
        print(f"# ignored arguments: {' '.join(ignored)}")

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)

    def want(name):
        return not filters or any(f in name for f in filters)

    def report(name, ms):
        print(f"RESULT {name} {ms:.4f} ms", flush=True)

    if want("torch_train_mlp_b64") or want("torch_train_mlp_b64_item"):
        mlp = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                            nn.Linear(1024, 10)).to(dev)
        opt = torch.optim.SGD(mlp.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 512, generator=gen).to(dev)
        y = torch.randint(0, 10, (64,), generator=gen).to(dev)

        def mlp_step(item=False):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(mlp(x), y)
            loss.backward()
            opt.step()
            if item:
                loss.item()

        if want("torch_train_mlp_b64"):
            report("torch_train_mlp_b64", measure(mlp_step, warmup, steps, batches))
        if want("torch_train_mlp_b64_item"):
            report("torch_train_mlp_b64_item", measure(lambda: mlp_step(True), warmup, steps, batches))

    if want("torch_train_cnn_b64"):
        cnn = CNN().to(dev)
        opt_c = torch.optim.Adam(cnn.parameters(), lr=1e-3)
        xc = torch.randn(64, 3, 32, 32, generator=gen).to(dev)
        yc = torch.randint(0, 10, (64,), generator=gen).to(dev)

        def cnn_step():
            opt_c.zero_grad(set_to_none=True)
            F.cross_entropy(cnn(xc), yc).backward()
            opt_c.step()

        report("torch_train_cnn_b64", measure(cnn_step, warmup, steps, batches))

    if want("torch_infer_resnet_b64"):
        net = ResNetSmall().to(dev).eval()
        xr = torch.randn(64, 3, 32, 32, generator=gen).to(dev)

        def infer():
            with torch.no_grad():
                net(xr)

        report("torch_infer_resnet_b64", measure(infer, warmup, steps, batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
