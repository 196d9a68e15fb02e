#!/usr/bin/env python3
"""PyTorch on the GPU, natively or through Flyt (flyt-run ... -- python3 this).

Stages (--stage all, or a comma-separated subset, always in this order):
  import      torch import (no CUDA work yet)
  init        CUDA init and device query (name, capability, SMs, memory)
  tensor_ops  elementwise, reductions, indexing, sorting on the GPU
  matmul      cuBLAS matmul in fp32 (no TF32), fp16 and bf16, bmm, addmm
  conv        cuDNN conv2d forward and backward
  mlp_train   a small MLP, 30 SGD steps on fixed synthetic data
  cnn_train   a small CNN, 30 Adam steps on fixed synthetic data
  compile     torch.compile (Inductor, Triton kernels) against eager
  compile_modes  torch.compile mode "reduce-overhead" (Inductor's CUDA graph
              trees) for inference and training against eager; cuDNN
              autotuning (cudnn.benchmark) against the CPU
  memory      caching-allocator statistics after a fixed allocation pattern
  cuda_graphs an inference graph and a whole training step captured, replayed
  sdpa        scaled_dot_product_attention fp16/bf16 with each backend forced
              (flash, efficient, math, cuDNN), causal and masked, forward and
              backward against fp32 math; grouped-query attention
  amp         autocast bf16 and fp16 training with GradScaler
  fft_linalg  cuFFT (fft, rfft2, irfft) and cuSOLVER/cuBLAS linalg (solve,
              cholesky, qr, svd, eigh, inv, lstsq, slogdet) against the CPU
  rnn         cuDNN LSTM/GRU with packed sequences, TransformerEncoderLayer,
              Embedding/EmbeddingBag, Batch/Layer/GroupNorm, against the CPU
  streams     streams with priorities, events, wait_stream, record_stream,
              pinned non_blocking copies, DataLoader (pin_memory, 0 and 2
              workers), device properties, memory summary, memory fraction
  random_sparse  seeded rand/randn/randint/multinomial/dropout (statistics),
              cuSPARSE COO/CSR products, sort/topk/unique/cumsum/scatter_add
  save_load   torch.save / torch.load of CUDA tensors and a state_dict
  allocator_async  child processes with PYTORCH_CUDA_ALLOC_CONF
              backend:cudaMallocAsync and expandable_segments:True
  profiler    torch.profiler asked for CUDA activities: the program runs and
              its operators are recorded (kernel timings, CUPTI's, are info)
  distributed torch.distributed on NCCL with one rank: collectives, DDP
  kernels_jit jiterator kernels (NVRTC), a hand-written Triton kernel, an
              fp8 matmul (cuBLASLt)
  multiprocessing  CUDA tensors through torch.multiprocessing both ways
  oom         out of memory recovered from: a tensor larger than the GPU,
              then 1 GiB tensors until the memory runs out; all freed, the
              program carries on

Each stage prints canonical text (compared between runs: values rounded,
losses to 6 significant digits) and its time; values that legitimately differ
between a whole GPU and a share (SM count, memory size, free memory) go to the
stage's "info", not its text. Every stage checks itself against a CPU
reference or an invariant; the exit status is 0 when all stages pass.

  --json FILE   write {"stages": [{name, ok, seconds, text, info, error}]}
                (rewritten after every stage, so a crash keeps what ran)
  --device D    cuda (default) or cpu (only to try the script without a GPU)
"""
import argparse
import copy
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

T_START = time.perf_counter()

# Before torch starts cuBLAS: deterministic algorithms need a fixed workspace.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# Compile in this process (workers would be CUDA clients of their own).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# Fresh compile caches, so every run compiles (and times) the same work.
_CACHE_DIR = None
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ and "TRITON_CACHE_DIR" not in os.environ:
    _CACHE_DIR = tempfile.mkdtemp(prefix="flyt-torch-cache.")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE_DIR, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE_DIR, "triton")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

T_IMPORTED = time.perf_counter()

STAGES = ["import", "init", "tensor_ops", "matmul", "conv", "mlp_train", "cnn_train",
          "compile", "compile_modes", "memory", "cuda_graphs", "sdpa", "amp", "fft_linalg", "rnn", "streams",
          "random_sparse", "save_load", "allocator_async", "profiler", "distributed", "kernels_jit",
          "multiprocessing", "oom", "fork_nvml"]


def g(x, digits=6):
    """A number as canonical text: `digits` significant digits, no -0."""
    x = float(x)
    s = f"{x:.{digits}g}"
    return "0" if s in ("-0", "0") else s


def gl(values, digits=6):
    return " ".join(g(v, digits) for v in values)


def cpu_gen(seed):
    return torch.Generator(device="cpu").manual_seed(seed)


def rel_err(got, ref):
    got = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


class Stage:
    """What one stage reports: text lines, info values, and its checks."""

    def __init__(self):
        self.lines = []
        self.info = {}
        self.ok = True

    def out(self, line):
        self.lines.append(line)

    def check(self, cond, what):
        self.out(f"{'PASS' if cond else 'FAIL'} {what}")
        self.ok = self.ok and bool(cond)


# ------------------------------------------------------------------ stages

def stage_import(st, dev):
    st.out(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}")
    st.info["torch"] = torch.__version__
    st.info["cuda"] = torch.version.cuda
    st.info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    st.info["seconds_before_import"] = round(T_IMPORTED - T_START, 3)


def stage_init(st, dev):
    if dev.type != "cuda":
        st.out("cpu run: no device query")
        return
    avail = torch.cuda.is_available()
    st.out(f"cuda available: {avail}")
    st.check(avail, "torch.cuda.is_available()")
    if not avail:
        return
    torch.cuda.init()
    count = torch.cuda.device_count()
    p = torch.cuda.get_device_properties(0)
    cap = torch.cuda.get_device_capability(0)
    st.out(f"device count >= 1: {count >= 1}")
    st.out(f"capability: {cap[0]}.{cap[1]}")
    st.info.update(name=p.name, capability=f"{cap[0]}.{cap[1]}", sm_count=p.multi_processor_count,
                   total_memory=p.total_memory, device_count=count)
    torch.zeros(1, device=dev).add_(1)  # a first kernel: the context is up
    torch.cuda.synchronize()
    st.check(count >= 1 and p.multi_processor_count > 0 and p.total_memory > 0 and p.name != "",
             "device properties readable")


def stage_tensor_ops(st, dev):
    gen = cpu_gen(1)
    a_cpu = torch.randn(1000, 257, generator=gen)
    b_cpu = torch.rand(1000, 257, generator=gen)
    idx_cpu = torch.randint(0, 1000, (4096,), generator=gen)
    a, b, idx = a_cpu.to(dev), b_cpu.to(dev), idx_cpu.to(dev)

    # elementwise
    e = (a * 2 + 1).sin() * b.exp() - a.abs().sqrt() / (b + 1)
    e_ref = ((a_cpu.double() * 2 + 1).sin() * b_cpu.double().exp()
             - a_cpu.double().abs().sqrt() / (b_cpu.double() + 1))
    st.out(f"elementwise: e[0,:4] = {gl(e[0, :4].cpu())}")
    st.check(rel_err(e, e_ref) < 1e-5, "elementwise matches the CPU")

    # reductions
    red = torch.stack([a.sum(), a.mean(), a.std(), a.max(), a.min(), a.norm(),
                       (b[:, :20] + 0.5).prod(dim=1).sum()])
    ad, bd = a_cpu.double(), b_cpu.double()
    red_ref = torch.stack([ad.sum(), ad.mean(), ad.std(), ad.max(), ad.min(), ad.norm(),
                           (bd[:, :20] + 0.5).prod(dim=1).sum()])
    st.out(f"reductions sum/mean/std/max/min/norm/prodsum: {gl(red.cpu())}")
    st.check(float(((red.cpu().double() - red_ref).abs() / red_ref.abs().clamp_min(1)).max()) < 1e-5,
             "reductions match the CPU")
    am = a.argmax(dim=1).cpu()
    cs = a.cumsum(dim=1)[:, -1].cpu()
    st.out(f"argmax rows 0..4: {am[:5].tolist()}, cumsum last col sum {g(cs.sum())}")
    st.check(torch.equal(am, a_cpu.argmax(dim=1)) and
             float((cs.double() - ad.cumsum(dim=1)[:, -1]).abs().max()) < 1e-3,
             "argmax and cumsum match the CPU")

    # indexing
    rows = a[idx]
    sl = a[10:900:7, 5:200:3]
    mask = a > 1.5
    picked = a.masked_select(mask)
    gathered = a.gather(1, (idx[:1000] % 257).unsqueeze(1))
    acc = torch.zeros(1000, device=dev).index_add_(0, idx, torch.ones(4096, device=dev))
    c = a.clone()
    c[idx[:100], 3] = -7.0
    st.out(f"indexing: rows sum {g(rows.sum().cpu())}, slice shape {tuple(sl.shape)} "
           f"sum {g(sl.sum().cpu())}, masked {picked.numel()}, gather sum {g(gathered.sum().cpu())}, "
           f"index_add max {g(acc.max().cpu())}, assigned {int((c == -7.0).sum().cpu())}")
    ok = (torch.equal(rows.cpu(), a_cpu[idx_cpu]) and torch.equal(sl.cpu(), a_cpu[10:900:7, 5:200:3])
          and torch.equal(picked.cpu(), a_cpu.masked_select(a_cpu > 1.5))
          and torch.equal(gathered.cpu(), a_cpu.gather(1, (idx_cpu[:1000] % 257).unsqueeze(1)))
          and torch.equal(acc.cpu(), torch.zeros(1000).index_add_(0, idx_cpu, torch.ones(4096))))
    st.check(ok, "indexing, masking, gather, index_add match the CPU exactly")

    # sorting and selection
    sv, si = a[0].sort()
    tv, ti = a.topk(5, dim=1)
    u = torch.unique((a * 3).round().clamp(-5, 5))
    nz = int(torch.nonzero(a > 2.0).shape[0])
    st.out(f"sort row 0 first {gl(sv[:3].cpu())}, topk row 0 {gl(tv[0].cpu())}, "
           f"unique {gl(u.cpu())}, nonzero {nz}")
    st.check(torch.equal(sv.cpu(), a_cpu[0].sort().values) and
             torch.equal(tv.cpu(), a_cpu.topk(5, dim=1).values) and
             torch.equal(u.cpu(), torch.unique((a_cpu * 3).round().clamp(-5, 5))) and
             nz == int(torch.nonzero(a_cpu > 2.0).shape[0]),
             "sort, topk, unique, nonzero match the CPU")


def stage_matmul(st, dev):
    gen = cpu_gen(2)
    a_cpu = torch.randn(256, 384, generator=gen)
    b_cpu = torch.randn(384, 128, generator=gen)
    ref = a_cpu.double() @ b_cpu.double()
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    c = a @ b
    st.out(f"fp32 matmul 256x384x128: sum {g(c.sum().cpu())} c[0,:3] {gl(c[0, :3].cpu())}")
    st.check(rel_err(c, ref) < 1e-5, "fp32 matmul (no TF32) matches the CPU")

    # tolerances: output rounding plus reduced-precision split-K reductions
    types = [("fp16", torch.float16, 5e-3), ("bf16", torch.bfloat16, 3e-2)] if dev.type == "cuda" else []
    for name, dt, tol in types:
        ah, bh = a.to(dt), b.to(dt)
        ch = ah @ bh
        href = ah.cpu().double() @ bh.cpu().double()
        st.out(f"{name} matmul: sum {g(ch.float().sum().cpu(), 5)} c[0,:3] {gl(ch[0, :3].float().cpu(), 4)}")
        st.check(rel_err(ch, href) < tol, f"{name} matmul matches the CPU within {tol}")

    x_cpu = torch.randn(6, 64, 48, generator=gen)
    y_cpu = torch.randn(6, 48, 32, generator=gen)
    bm = torch.bmm(x_cpu.to(dev), y_cpu.to(dev))
    st.out(f"bmm 6x64x48x32: sum {g(bm.sum().cpu())}")
    st.check(rel_err(bm, x_cpu.double() @ y_cpu.double()) < 1e-5, "bmm matches the CPU")
    w_cpu = torch.randn(100, 384, generator=gen)
    bias_cpu = torch.randn(100, generator=gen)
    lin = F.linear(a, w_cpu.to(dev), bias_cpu.to(dev))
    st.out(f"linear (addmm) 256x384 -> 100: sum {g(lin.sum().cpu())}")
    st.check(rel_err(lin, a_cpu.double() @ w_cpu.double().t() + bias_cpu.double()) < 1e-5,
             "linear with bias matches the CPU")


def stage_conv(st, dev):
    gen = cpu_gen(3)
    x_cpu = torch.randn(8, 3, 32, 32, generator=gen)
    w_cpu = torch.randn(16, 3, 3, 3, generator=gen) * 0.2
    b_cpu = torch.randn(16, generator=gen)
    results = {}
    for where, d, dt in (("dev", dev, torch.float32), ("ref", torch.device("cpu"), torch.float64)):
        x = x_cpu.to(d, dt, copy=True).requires_grad_(True)
        w = w_cpu.to(d, dt, copy=True).requires_grad_(True)
        b = b_cpu.to(d, dt, copy=True).requires_grad_(True)
        y = F.conv2d(x, w, b, stride=1, padding=1)
        z = F.conv2d(F.relu(y), w.new_ones(4, 16, 3, 3) * 0.05, None, stride=2, padding=1)
        loss = z.square().mean()
        loss.backward()
        results[where] = (y.detach(), z.detach(), loss.detach(), x.grad, w.grad, b.grad)
    y, z, loss, gx, gw, gb = results["dev"]
    st.out(f"conv2d fwd: y sum {g(y.sum().cpu())}, z sum {g(z.sum().cpu())}, loss {g(loss.cpu())}")
    st.out(f"conv2d bwd: grad x sum {g(gx.sum().cpu())}, grad w sum {g(gw.sum().cpu())}, "
           f"grad b {gl(gb[:4].cpu())}")
    errs = [rel_err(a, r) for a, r in zip(results["dev"], results["ref"])]
    st.check(max(errs) < 1e-4, "conv2d forward and backward match the CPU (float64)")


def make_classification(n, features, classes, seed):
    gen = cpu_gen(seed)
    x = torch.randn(n, features, generator=gen)
    w = torch.randn(features, classes, generator=gen)
    y = (x @ w + 0.5 * torch.randn(n, classes, generator=gen)).argmax(dim=1)
    return x, y


def train(st, dev, model, opt, x, y, batch, steps):
    model.train()
    losses = []
    for step in range(steps):
        lo = (step * batch) % x.shape[0]
        xb, yb = x[lo:lo + batch], y[lo:lo + batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = torch.stack(losses).cpu().tolist()  # one copy at the end: no sync per step
    for i in range(0, steps, 10):
        st.out(f"losses {i:2d}-{min(i + 9, steps - 1):2d}: {gl(losses[i:i + 10])}")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    st.info["first_loss"], st.info["last_loss"] = losses[0], losses[-1]
    st.check(all(v == v and abs(v) != float("inf") for v in losses) and last < first,
             f"{steps} steps: losses finite and falling")
    return losses


def stage_mlp_train(st, dev):
    x, y = make_classification(512, 64, 10, seed=4)
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(st, dev, model, opt, x.to(dev), y.to(dev), batch=64, steps=30)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn(self.c2(x))), 2)
        return self.fc(x.flatten(1))


def stage_cnn_train(st, dev):
    gen = cpu_gen(5)
    n = 512
    y = torch.randint(0, 10, (n,), generator=gen)
    # one 16x16 pattern per class, plus noise
    patterns = torch.randn(10, 1, 16, 16, generator=gen)
    x = patterns[y] + 0.8 * torch.randn(n, 1, 16, 16, generator=gen)
    torch.manual_seed(4321)
    model = SmallCNN().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    train(st, dev, model, opt, x.to(dev), y.to(dev), batch=64, steps=30)


def stage_compile(st, dev):
    def fn(x, y):
        return torch.sin(x) * torch.cos(y) + F.gelu(x * y) - (x - y).abs().sum(dim=-1, keepdim=True) / 64

    torch._dynamo.reset()
    gen = cpu_gen(6)
    x = torch.randn(512, 64, generator=gen).to(dev)
    y = torch.randn(512, 64, generator=gen).to(dev)
    cfn = torch.compile(fn)
    eager = fn(x, y)
    got = cfn(x, y)
    got2 = cfn(x + 1, y)  # same shapes: no recompilation
    diff = float((got - eager).abs().max())
    diff2 = float((got2 - fn(x + 1, y)).abs().max())
    st.out(f"compiled function: sum {g(got.sum().cpu(), 4)}, max |compiled - eager| < 1e-4: "
           f"{diff < 1e-4 and diff2 < 1e-4}")
    st.info["max_abs_diff"] = max(diff, diff2)
    st.check(diff < 1e-4 and diff2 < 1e-4, "torch.compile function matches eager")

    torch.manual_seed(99)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 32)).to(dev)
    model.eval()
    cmodel = torch.compile(model)
    with torch.no_grad():
        ref = model(x)
        out = cmodel(x)
    mdiff = float((out - ref).abs().max())
    st.out(f"compiled model: sum {g(out.sum().cpu(), 4)}, max |compiled - eager| < 1e-4: {mdiff < 1e-4}")
    st.info["model_max_abs_diff"] = mdiff
    st.check(mdiff < 1e-4, "torch.compile model matches eager")


def stage_compile_modes(st, dev):
    if not cuda_only(st, dev, "CUDA graphs nor cuDNN"):
        return
    torch._dynamo.reset()
    gen = cpu_gen(13)
    xs = [torch.randn(32, 64, generator=gen).to(dev) for _ in range(3)]
    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 16)).to(dev)
    with torch.no_grad():
        ref = [model(x) for x in xs]
        cmodel = torch.compile(model, mode="reduce-overhead")
        got = [cmodel(x).clone() for _ in range(3) for x in xs]  # recorded, then replayed
    diff = max(float((o - r).abs().max()) for o, r in zip(got, ref * 3))
    st.out(f"reduce-overhead inference: {len(got)} calls, max |compiled - eager| < 1e-4: {diff < 1e-4}")
    st.info["inference_max_abs_diff"] = diff
    st.check(diff < 1e-4, "torch.compile reduce-overhead inference matches eager")

    torch._dynamo.reset()
    y = torch.randint(0, 16, (32,), generator=gen).to(dev)
    twin = copy.deepcopy(model)
    losses = {}
    for name, net in (("eager", model), ("compiled", torch.compile(twin, mode="reduce-overhead"))):
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        run = []
        for step in range(8):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xs[step % 3]), y)
            loss.backward()
            opt.step()
            run.append(loss.detach().clone())
        losses[name] = torch.stack(run).cpu()
    tdiff = float((losses["compiled"] - losses["eager"]).abs().max())
    st.out(f"reduce-overhead training: 8 steps, losses falling: "
           f"{bool(losses['compiled'][-1] < losses['compiled'][0])}, "
           f"max |compiled - eager| < 1e-4: {tdiff < 1e-4}")
    st.info["training_max_abs_diff"] = tdiff
    st.check(tdiff < 1e-4 and losses["compiled"][-1] < losses["compiled"][0],
             "torch.compile reduce-overhead training matches eager")

    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
    try:
        conv = nn.Conv2d(16, 32, 3, padding=1).to(dev)
        x = torch.randn(16, 16, 28, 28, generator=gen).to(dev)
        with torch.no_grad():
            outs = [conv(x) for _ in range(3)]  # the first one times the algorithms
        w, b = conv.weight.detach().cpu().double(), conv.bias.detach().cpu().double()
        ref = F.conv2d(x.cpu().double(), w, b, padding=1)
        err = max(rel_err(o, ref) for o in outs)
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved
    st.out(f"cudnn.benchmark conv2d: 3 calls, relative error < 1e-3: {err < 1e-3}")
    st.info["cudnn_benchmark_rel_err"] = err
    st.check(err < 1e-3, "cuDNN autotuned conv2d matches the CPU (float64)")
    torch._dynamo.reset()  # the CUDA graph trees' memory goes back before the next stage


def stage_memory(st, dev):
    if dev.type != "cuda":
        st.out("cpu run: no allocator statistics")
        return
    import gc
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    base_peak = torch.cuda.max_memory_allocated()
    MiB = 1 << 20
    keep = []
    sizes = [1 * MiB, 3 * MiB, 512 * 1024, 20 * MiB, 100, 7 * MiB + 3]
    for s in sizes:
        keep.append(torch.empty(s, dtype=torch.uint8, device=dev))
    del keep[1]  # free 3 MiB in the middle
    keep.append(torch.empty(2 * MiB, dtype=torch.uint8, device=dev))  # fits the freed block
    big = torch.empty(64 * MiB, dtype=torch.uint8, device=dev)
    del big
    torch.cuda.synchronize()
    alloc = torch.cuda.memory_allocated() - base_alloc
    peak = torch.cuda.max_memory_allocated() - base_peak
    reserved = torch.cuda.memory_reserved() - base_reserved
    st.out(f"after the pattern: allocated +{alloc} B, peak +{peak} B, reserved +{reserved} B")
    # The allocator rounds up and may hand out a larger cached block whole.
    st.check(alloc >= sum(t.numel() for t in keep) and peak >= alloc + 64 * MiB and reserved >= alloc,
             "allocator statistics consistent with the pattern")
    del keep
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    st.info.update(free=free, total=total, allocated=alloc, peak=peak, reserved=reserved)
    st.out(f"mem_get_info: 0 < free <= total: {0 < free <= total}")
    st.check(0 < free <= total, "torch.cuda.mem_get_info")


def _warm_up(fn, n=3):
    """What torch.cuda.graphs asks before a capture: a few runs on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(side)


def stage_cuda_graphs(st, dev):
    if dev.type != "cuda":
        st.out("cpu run: no CUDA graphs")
        return
    gen = cpu_gen(7)
    torch.manual_seed(77)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev).eval()
    static_in = torch.zeros(32, 64, device=dev)
    with torch.no_grad():
        _warm_up(lambda: model(static_in))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)
        worst = 0.0
        for _ in range(3):
            x = torch.randn(32, 64, generator=gen).to(dev)
            static_in.copy_(x)
            graph.replay()
            worst = max(worst, float((static_out - model(x)).abs().max()))
    st.out(f"inference graph replayed 3 times, max |replay - eager| < 1e-5: {worst < 1e-5}")
    st.info["inference_max_abs_diff"] = worst
    st.check(worst < 1e-5, "CUDA-graph inference matches eager")

    # a whole training step captured (forward, backward, SGD step), replayed
    # against the same steps run eagerly on a copy of the model
    torch.manual_seed(78)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dev)
    ref = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dev)
    ref.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    xs = [torch.randn(64, 16, generator=gen).to(dev) for _ in range(6)]
    ys = [x.sum(dim=1, keepdim=True).tanh() for x in xs]
    sx, sy = xs[0].clone(), ys[0].clone()

    def step(model, optim, x, y):
        optim.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optim.step()
        return loss

    _warm_up(lambda: step(net, opt, sx, sy))
    for _ in range(3):  # the reference takes the same warm-up steps
        step(ref, ref_opt, xs[0], ys[0])
    opt.zero_grad(set_to_none=True)
    train_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(train_graph):
        static_loss = step(net, opt, sx, sy)
    losses = []
    for x, y in zip(xs[1:], ys[1:]):
        sx.copy_(x)
        sy.copy_(y)
        train_graph.replay()
        losses.append(float(static_loss))
        step(ref, ref_opt, x, y)
    pdiff = max(float((a - b).abs().max()) for a, b in zip(net.parameters(), ref.parameters()))
    st.out(f"training step graph replayed {len(losses)} times, losses fall: {losses[-1] < losses[0]}, "
           f"max |graph - eager| parameter < 1e-4: {pdiff < 1e-4}")
    st.info["train_losses"] = losses
    st.info["train_max_param_diff"] = pdiff
    st.check(pdiff < 1e-4, "CUDA-graph training steps match eager")


def cuda_only(st, dev, what):
    """False (and says so) on a CPU run: the stage needs CUDA."""
    if dev.type != "cuda":
        st.out(f"cpu run: no {what}")
        return False
    return True


def dev_and_ref(module, inputs, dev, run, dev_dtype=torch.float32):
    """run(module copy, *inputs) on dev in dev_dtype and on the CPU in float64,
    from the same initial weights, then backward of the mean squares of its
    outputs times fixed random weights (normalized outputs have a constant
    plain mean square). Returns (dev, ref) lists: outputs, loss, input and
    parameter gradients, floating-point buffers (running statistics)."""
    results = []
    for d, dt in ((dev, dev_dtype), (torch.device("cpu"), torch.float64)):
        m = copy.deepcopy(module).to(d, dt)
        ins = [t.detach().to(d, dt, copy=True).requires_grad_(True) if t.is_floating_point() else t.to(d)
               for t in inputs]
        outs = run(m, *ins)
        loss = sum((o * torch.randn(o.shape, generator=cpu_gen(100 + i), dtype=torch.float64).to(o))
                   .square().mean() for i, o in enumerate(outs))
        loss.backward()
        grads = [t.grad for t in ins if t.is_floating_point()]
        grads += [p.grad for p in m.parameters() if p.grad is not None]
        bufs = [b for b in m.buffers() if b.is_floating_point()]
        results.append([o.detach() for o in outs] + [loss.detach()] + grads + bufs)
    return results


def max_rel_err(got_list, ref_list):
    return max(rel_err(a, r) for a, r in zip(got_list, ref_list))


# PyTorch's random kernels cap their grid at 2048 threads per SM, and which
# thread draws which value follows the grid: tensors of at most 16 x 2048
# elements draw the same values on a whole GPU and on shares of 16 SMs or more.
RANDOM_N = 1 << 15


def stage_sdpa(st, dev):
    if not cuda_only(st, dev, "SDPA backends"):
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gen = cpu_gen(11)
    B, H, L, D = 2, 4, 128, 64
    q0, k0, v0, do0 = (torch.randn(B, H, L, D, generator=gen) for _ in range(4))
    allowed = torch.rand(L, L, generator=gen) > 0.25
    allowed.fill_diagonal_(True)  # every query attends to something

    def attend(backend, dtype, causal, mask):
        q, k, v = (t.to(dev, dtype).requires_grad_(True) for t in (q0, k0, v0))
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        out.backward(do0.to(dev, dtype))
        return [out.detach(), q.grad, k.grad, v.grad]

    def reference(dtype, causal, mask):
        # the same rounded inputs, in fp32 through the math backend (no TF32)
        q, k, v = (t.to(dtype).float().to(dev).requires_grad_(True) for t in (q0, k0, v0))
        with sdpa_kernel([SDPBackend.MATH]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        out.backward(do0.to(dtype).float().to(dev))
        return [out.detach(), q.grad, k.grad, v.grad]

    backends = [("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
                ("math", "MATH"), ("cudnn", "CUDNN_ATTENTION")]
    tols = {"fp16": (torch.float16, 1e-2, 2e-2), "bf16": (torch.bfloat16, 4e-2, 8e-2)}
    dev_mask = allowed.to(dev)
    cases = [("causal", True, None), ("bool mask", False, dev_mask)]
    for dname, (dtype, tol_out, tol_grad) in tols.items():
        for case, causal, mask in cases:
            ref = reference(dtype, causal, mask)
            if dname == "fp16":
                st.out(f"math fp32 {case}: out |sum| {g(ref[0].abs().sum().cpu(), 5)}")
            for bname, attr in backends:
                label = f"{bname} {dname} {case}"
                backend = getattr(SDPBackend, attr, None)
                if backend is None:
                    st.out(f"{label}: skipped (no SDPBackend.{attr} in this PyTorch)")
                    continue
                try:
                    got = attend(backend, dtype, causal, mask)
                except RuntimeError as e:
                    # flash takes no arbitrary mask, cuDNN may not cover a case:
                    # "No available kernel" is a legitimate skip, the same natively.
                    if bname == "cudnn" or (mask is not None and bname == "flash") or \
                            "No available kernel" in str(e):
                        st.out(f"{label}: skipped (no kernel for this case)")
                        st.info[f"{label} skipped"] = str(e).splitlines()[0][:200]
                        continue
                    raise
                e_out = rel_err(got[0], ref[0])
                e_grad = max_rel_err(got[1:], ref[1:])
                st.info[f"{label} err out/grad"] = [round(e_out, 6), round(e_grad, 6)]
                st.out(f"{label}: out dtype {str(got[0].dtype).replace('torch.', '')}, "
                       f"shape {tuple(got[0].shape)}")
                st.check(e_out < tol_out and e_grad < tol_grad,
                         f"{label} forward within {tol_out} and backward within {tol_grad} of fp32 math")

    # grouped-query attention (8 query heads over 2 key/value heads), default backend choice
    gq = torch.randn(B, 8, L, D, generator=gen)
    gk = torch.randn(B, 2, L, D, generator=gen)
    gv = torch.randn(B, 2, L, D, generator=gen)
    try:
        got = F.scaled_dot_product_attention(gq.to(dev, torch.float16), gk.to(dev, torch.float16),
                                             gv.to(dev, torch.float16), is_causal=True, enable_gqa=True)
    except TypeError as e:  # PyTorch before 2.5
        st.out("gqa: skipped (no enable_gqa)")
        st.info["gqa skipped"] = str(e)
        return
    rk = gk.half().float().repeat_interleave(4, dim=1).to(dev)
    rv = gv.half().float().repeat_interleave(4, dim=1).to(dev)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(gq.half().float().to(dev), rk, rv, is_causal=True)
    err = rel_err(got, ref)
    st.info["gqa err"] = round(err, 6)
    st.check(err < 1e-2, "grouped-query attention (enable_gqa) matches repeated heads in fp32")


def stage_amp(st, dev):
    if not cuda_only(st, dev, "autocast on CUDA"):
        return
    x, y = make_classification(512, 64, 10, seed=12)
    x, y = x.to(dev), y.to(dev)
    steps, batch = 20, 64

    def fresh_model():
        torch.manual_seed(1212)
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 10)).to(dev)

    with torch.no_grad():
        fp32_first = float(F.cross_entropy(fresh_model()(x[:batch]), y[:batch]))
    st.out(f"fp32 first loss {g(fp32_first, 4)}")
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        model = fresh_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        # a short growth interval: the scale grows until fp16 gradients
        # overflow, so the skipped-step path runs too
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 14, growth_interval=3)
        losses, scales, out_dtypes = [], [], set()
        for step in range(steps):
            lo = (step * batch) % x.shape[0]
            xb, yb = x[lo:lo + batch], y[lo:lo + batch]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dt):
                logits = model(xb)
                loss = F.cross_entropy(logits, yb)
            out_dtypes.add(str(logits.dtype).replace("torch.", ""))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.detach().float())
            scales.append(scaler.get_scale())
        losses = torch.stack(losses).cpu().tolist()
        st.out(f"{name}: logits {','.join(sorted(out_dtypes))}, loss dtype float32: "
               f"{loss.dtype == torch.float32}, params float32: "
               f"{all(p.dtype == torch.float32 for p in model.parameters())}")
        for i in range(0, steps, 10):
            st.out(f"{name} losses {i:2d}-{min(i + 9, steps - 1):2d}: {gl(losses[i:i + 10], 4)}")
        st.out(f"{name} scales: {gl(scales)}")
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        st.check(all(v == v and abs(v) != float("inf") for v in losses) and last < first,
                 f"{name} autocast: losses finite and falling")
        st.check(out_dtypes == {str(dt).replace("torch.", "")} and loss.dtype == torch.float32,
                 f"{name} autocast: matmuls in {name}, cross entropy in float32")
        st.check(abs(losses[0] - fp32_first) < 0.02 * abs(fp32_first),
                 f"{name} first loss within 2% of fp32")


def complex_rel_err(got, ref):
    got = got.detach().to("cpu").to(torch.complex128)
    ref = ref.detach().to("cpu").to(torch.complex128)
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def stage_fft_linalg(st, dev):
    gen = cpu_gen(13)
    xc = torch.complex(torch.randn(4, 1000, generator=gen), torch.randn(4, 1000, generator=gen))
    f = torch.fft.fft(xc.to(dev))
    f_ref = torch.fft.fft(xc.to(torch.complex128))
    st.out(f"fft 4x1000 complex64: |X| sum {g(f.abs().sum().cpu(), 5)}")
    st.check(complex_rel_err(f, f_ref) < 1e-5, "fft matches the CPU")
    img = torch.randn(3, 64, 48, generator=gen)
    r2 = torch.fft.rfft2(img.to(dev))
    back = torch.fft.irfft2(r2, s=img.shape[-2:])
    st.out(f"rfft2 3x64x48: shape {tuple(r2.shape)}, |X| sum {g(r2.abs().sum().cpu(), 5)}")
    st.check(complex_rel_err(r2, torch.fft.rfft2(img.double())) < 1e-5 and rel_err(back, img) < 1e-5,
             "rfft2 matches the CPU and irfft2 gives the image back")
    sig = torch.randn(8, 250, generator=gen)
    spec = torch.fft.rfft(sig.to(dev), dim=-1)
    rec = torch.fft.irfft(spec, n=250, dim=-1)
    st.check(rel_err(rec, sig) < 1e-5, "irfft(rfft(x), n=250) gives x back")

    n = 64
    for name, dt, tol, digits in (("float64", torch.float64, 1e-9, 8), ("float32", torch.float32, 1e-4, 5)):
        m_cpu = torch.randn(n, n, generator=gen, dtype=torch.float64)
        a_cpu = m_cpu @ m_cpu.t() + n * torch.eye(n, dtype=torch.float64)  # SPD, well conditioned
        b_cpu = torch.randn(n, 3, generator=gen, dtype=torch.float64)
        t_cpu = torch.randn(100, 20, generator=gen, dtype=torch.float64)
        tb_cpu = torch.randn(100, 2, generator=gen, dtype=torch.float64)
        m, a, b = m_cpu.to(dev, dt), a_cpu.to(dev, dt), b_cpu.to(dev, dt)
        eye = torch.eye(n, device=dev, dtype=dt)

        x = torch.linalg.solve(a, b)
        chol = torch.linalg.cholesky(a)
        q, r = torch.linalg.qr(m)
        u, s, vh = torch.linalg.svd(m, full_matrices=False)
        w, v = torch.linalg.eigh(a)
        inv = torch.linalg.inv(a)
        ls = torch.linalg.lstsq(t_cpu.to(dev, dt), tb_cpu.to(dev, dt)).solution
        sign, logdet = torch.linalg.slogdet(a)

        s_ref = torch.linalg.svdvals(m_cpu)
        w_ref = torch.linalg.eigvalsh(a_cpu)
        st.out(f"{name}: eigh w[0] {g(w[0].cpu(), digits)} w[-1] {g(w[-1].cpu(), digits)}, "
               f"svd s[0] {g(s[0].cpu(), digits)} s[-1] {g(s[-1].cpu(), digits)}, "
               f"logdet {g(logdet.cpu(), digits)}")
        checks = {
            "solve": rel_err(x, torch.linalg.solve(a_cpu, b_cpu)),
            "cholesky": rel_err(chol, torch.linalg.cholesky(a_cpu)),
            "qr (Q R = M, Q^T Q = I)": max(rel_err(q @ r, m_cpu), rel_err(q.t() @ q, eye.cpu())),
            "svd (values, U S Vh = M)": max(rel_err(s, s_ref), rel_err(u @ torch.diag(s) @ vh, m_cpu)),
            "eigh (values, A V = V W)": max(rel_err(w, w_ref), rel_err(a @ v, v * w)),
            "inv": rel_err(inv @ a, eye.cpu()),
            "lstsq": rel_err(ls, torch.linalg.lstsq(t_cpu, tb_cpu, driver="gelsd").solution),
            "slogdet": rel_err(logdet.reshape(1), torch.linalg.slogdet(a_cpu)[1].reshape(1)),
        }
        st.info[f"{name} errors"] = {k: float(f"{e:.3g}") for k, e in checks.items()}
        st.check(float(sign) == 1.0, f"{name} slogdet sign of an SPD matrix is +1")
        for what, err in checks.items():
            st.check(err < tol, f"{name} {what} matches the CPU within {tol}")
    if dev.type == "cuda":
        st.info["preferred_linalg_library"] = str(torch.backends.cuda.preferred_linalg_library())


def stage_rnn(st, dev):
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    gen = cpu_gen(14)
    x = torch.randn(5, 12, 16, generator=gen)
    lengths = torch.tensor([7, 12, 3, 9, 1])  # unsorted: enforce_sorted=False sorts them

    def recurrent(m, xi):
        out, h = m(xi)
        h = h[0] if isinstance(h, tuple) else h
        packed = pack_padded_sequence(xi, lengths, batch_first=True, enforce_sorted=False)
        pout, _ = m(packed)
        padded, _ = pad_packed_sequence(pout, batch_first=True)
        return [out, h, padded]

    torch.manual_seed(1414)
    modules = [("lstm 2 layers bidirectional", nn.LSTM(16, 32, num_layers=2, batch_first=True, bidirectional=True)),
               ("gru", nn.GRU(16, 24, batch_first=True))]
    for name, mod in modules:
        got, ref = dev_and_ref(mod, [x], dev, recurrent)
        st.out(f"{name}: out {tuple(got[0].shape)} |sum| {g(got[0].abs().sum().cpu(), 5)}, packed out "
               f"{tuple(got[2].shape)} |sum| {g(got[2].abs().sum().cpu(), 5)}, loss {g(got[3].cpu(), 5)}")
        err = max_rel_err(got, ref)
        st.info[f"{name} err"] = float(f"{err:.3g}")
        st.check(err < 2e-4, f"{name} forward, packed sequences and backward match the CPU (float64)")

    torch.manual_seed(1515)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    src = torch.randn(4, 10, 32, generator=gen)

    def encode(m, s):
        mask = torch.full((10, 10), float("-inf"), device=s.device, dtype=s.dtype).triu(1)  # causal
        return [m(s, src_mask=mask), m(s)]

    got, ref = dev_and_ref(layer, [src], dev, encode)
    st.out(f"transformer encoder layer: causal |sum| {g(got[0].abs().sum().cpu(), 5)}, "
           f"full |sum| {g(got[1].abs().sum().cpu(), 5)}, loss {g(got[2].cpu(), 5)}")
    err = max_rel_err(got, ref)
    st.info["transformer err"] = float(f"{err:.3g}")
    st.check(err < 2e-4, "transformer encoder layer forward and backward match the CPU (float64)")
    fast = copy.deepcopy(layer).to(dev).eval()
    with torch.no_grad():  # eval without grad: the fused fast path where it applies
        fast_out = fast(src.to(dev))
    err = rel_err(fast_out, got[1])
    st.info["transformer eval err"] = float(f"{err:.3g}")
    st.check(err < 1e-4, "transformer encoder layer in eval (fast path) matches training mode")

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 8, padding_idx=0)
            self.bag_sum = nn.EmbeddingBag(50, 8, mode="sum")
            self.bag_mean = nn.EmbeddingBag(50, 8, mode="mean")
            self.bag_max = nn.EmbeddingBag(50, 8, mode="max")

        def forward(self, idx, offsets, weights):
            return [self.emb(idx.view(6, 10)), self.bag_sum(idx, offsets, per_sample_weights=weights),
                    self.bag_mean(idx, offsets), self.bag_max(idx, offsets)]

    torch.manual_seed(1616)
    idx = torch.randint(0, 50, (60,), generator=gen)
    offsets = torch.tensor([0, 5, 5, 17, 30, 44])  # one empty bag
    weights = torch.rand(60, generator=gen)
    got, ref = dev_and_ref(Embeddings(), [idx, offsets, weights], dev, lambda m, *a: m(*a))
    st.out(f"embedding |sum| {g(got[0].abs().sum().cpu(), 5)}, bags sum/mean/max |sum| "
           f"{' '.join(g(t.abs().sum().cpu(), 5) for t in got[1:4])}")
    err = max_rel_err(got, ref)
    st.info["embedding err"] = float(f"{err:.3g}")
    st.check(err < 1e-5, "Embedding and EmbeddingBag (sum with weights, mean, max) forward and backward match the CPU")

    class Norms(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn2 = nn.BatchNorm2d(6)
            self.gn = nn.GroupNorm(3, 6)
            self.ln = nn.LayerNorm([6, 5, 5])
            self.bn1 = nn.BatchNorm1d(6)

        def forward(self, img, vec):
            return [self.bn2(img), self.gn(img), self.ln(img), self.bn1(vec)]

    torch.manual_seed(1717)
    norms = Norms()
    for p in norms.parameters():  # not the identity affine
        nn.init.uniform_(p, 0.5, 1.5)
    img = torch.randn(4, 6, 5, 5, generator=gen) * 3 + 1
    vec = torch.randn(8, 6, generator=gen) * 2 - 1
    got, ref = dev_and_ref(norms, [img, vec], dev, lambda m, *a: m(*a))
    st.out(f"norms loss {g(got[4].cpu(), 5)}, running mean |sum| {g(got[-4].abs().sum().cpu(), 5)}")
    err = max_rel_err(got, ref)
    st.info["norms err"] = float(f"{err:.3g}")
    st.check(err < 1e-4, "BatchNorm1d/2d (with running statistics), GroupNorm, LayerNorm match the CPU")


def stage_streams(st, dev):
    if not cuda_only(st, dev, "streams"):
        return
    least, greatest = torch.cuda.Stream.priority_range()
    side = torch.cuda.Stream(priority=-1)
    copier = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    st.out(f"priority range least {least} greatest {greatest}; side stream priority {side.priority}, "
           f"default {main.priority}")
    st.check(greatest <= side.priority <= least, "stream priority within the device's range")

    # pinned host memory copied in and out on two streams: chunk i+1's copy in
    # overlaps chunk i's kernels and copy out
    gen = cpu_gen(15)
    chunks, n = 4, 1 << 20
    host = torch.randn(chunks, n, generator=gen).pin_memory()
    back = torch.empty(chunks, n, pin_memory=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(chunks):
        with torch.cuda.stream(copier):
            d = host[i].to(dev, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(copier)
        with torch.cuda.stream(side):
            side.wait_event(copied)
            d.record_stream(side)  # allocated on copier, used on side
            r = (d * 2 + 1).sin()
            back[i].copy_(r, non_blocking=True)
        del d, r
    main.wait_stream(side)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    st.info["pipelined ms"] = round(ms, 3)
    ok = host.is_pinned() and back.is_pinned() and rel_err(back, (host * 2 + 1).sin()) < 1e-5
    st.out(f"pinned non_blocking copies on 2 streams: {chunks} x {n} floats, elapsed > 0: {ms > 0}, "
           f"events and streams done: {end.query() and side.query() and copier.query()}")
    st.check(ok and ms > 0, "pipelined pinned copies and kernels give the CPU's result")

    # wait_stream orders a consumer on main after a long producer on side
    with torch.cuda.stream(side):
        a = torch.ones(2048, 2048, device=dev)
        for _ in range(20):
            a = a * 1.0001 + 0.0
    main.wait_stream(side)
    total = a.sum()
    a.record_stream(main)
    torch.cuda.synchronize()
    expect = 2048 * 2048 * 1.0001 ** 20
    st.check(abs(float(total) - expect) < 1e-4 * expect, "wait_stream orders the side stream's work first")

    # DataLoader with pinned batches, in-process and with worker processes
    # (workers never touch CUDA; the pin-memory thread of this process does)
    ds = torch.utils.data.TensorDataset(torch.arange(1024.).view(256, 4), torch.arange(256))
    for workers in (0, 2):
        dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=False, pin_memory=True, num_workers=workers)
        acc = torch.zeros((), device=dev)
        labels = torch.zeros((), device=dev, dtype=torch.long)
        pinned, batches = True, 0
        for xb, yb in dl:
            pinned = pinned and xb.is_pinned() and yb.is_pinned()
            acc += xb.to(dev, non_blocking=True).sum()
            labels += yb.to(dev, non_blocking=True).sum()
            batches += 1
        st.out(f"DataLoader num_workers={workers}: {batches} batches, pinned {pinned}, "
               f"sum {g(acc.cpu())}, labels {int(labels.cpu())}")
        st.check(pinned and batches == 8 and float(acc) == 1023 * 1024 / 2 and int(labels) == 255 * 256 // 2,
                 f"DataLoader pin_memory num_workers={workers}")

    p = torch.cuda.get_device_properties(dev)
    for k in ("name", "major", "minor", "total_memory", "multi_processor_count", "L2_cache_size",
              "warp_size", "max_threads_per_multi_processor", "regs_per_multiprocessor", "uuid"):
        st.info[f"prop {k}"] = str(getattr(p, k, None))
    st.out(f"properties: capability {p.major}.{p.minor}, warp size {getattr(p, 'warp_size', 32)}")
    st.check(p.total_memory > 0 and p.multi_processor_count > 0, "get_device_properties")

    summary = torch.cuda.memory_summary()
    stats = torch.cuda.memory_stats()
    st.check("memory summary" in summary.lower() and "allocated_bytes.all.current" in stats,
             "memory_summary and memory_stats")
    del a, total, host, back
    torch.cuda.synchronize()
    reserved_before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    reserved_after = torch.cuda.memory_reserved()
    free, total_mem = torch.cuda.mem_get_info()
    st.info.update(reserved_before=reserved_before, reserved_after=reserved_after, free=free, total=total_mem)
    st.check(reserved_after <= reserved_before and 0 < free <= total_mem, "empty_cache and mem_get_info")

    # a memory fraction the allocator enforces itself: a request over it
    # fails with OutOfMemoryError before it reaches the device
    torch.cuda.set_per_process_memory_fraction(0.05)
    try:
        too_big = torch.empty(total_mem // 10, dtype=torch.uint8, device=dev)
        refused = False
        del too_big
    except torch.cuda.OutOfMemoryError:
        refused = True
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    after = torch.ones(1 << 20, device=dev).sum()
    st.out(f"memory fraction 0.05: 10% of the device refused with OutOfMemoryError: {refused}; "
           f"then 1 MiB works: {float(after) == float(1 << 20)}")
    # expandable segments map memory their own way: there the refusal is
    # only compared between runs, not required
    expandable = "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").lower()
    st.check((refused or expandable) and float(after) == float(1 << 20),
             "set_per_process_memory_fraction enforced")


def stage_random_sparse(st, dev):
    torch.manual_seed(2024)
    u = torch.rand(RANDOM_N, device=dev)
    z = torch.randn(RANDOM_N, device=dev)
    ri = torch.randint(0, 10, (RANDOM_N,), device=dev)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], device=dev)
    draws = torch.multinomial(probs, 4000, replacement=True)
    perm = torch.multinomial(torch.ones(100, device=dev), 50, replacement=False)
    drop = F.dropout(torch.ones(RANDOM_N, device=dev), p=0.3, training=True)
    # the seeded values themselves: compared between runs through this text
    st.out(f"rand {gl(u[:3].cpu())} sum {g(u.sum().cpu())}; randn {gl(z[:3].cpu())} sum {g(z.sum().cpu())}")
    st.out(f"randint first {ri[:8].cpu().tolist()}; multinomial first {draws[:8].cpu().tolist()} "
           f"without replacement first {perm[:8].cpu().tolist()}; dropout zeros {int((drop == 0).sum().cpu())}")
    counts = torch.bincount(ri, minlength=10).cpu().double() / RANDOM_N
    freq = torch.bincount(draws, minlength=4).cpu().double() / 4000
    kept = drop[drop != 0]
    stats_ok = (0.49 < float(u.mean()) < 0.51 and float(u.min()) >= 0 and float(u.max()) < 1
                and abs(float(z.mean())) < 0.03 and 0.98 < float(z.std()) < 1.02
                and float((counts - 0.1).abs().max()) < 0.01 and int(ri.min()) == 0 and int(ri.max()) == 9
                and float((freq - probs.cpu().double()).abs().max()) < 0.03
                and perm.unique().numel() == 50
                and 0.28 < float((drop == 0).double().mean()) < 0.32
                and float((kept - 1 / 0.7).abs().max()) < 1e-6)
    st.check(stats_ok, "random statistics: uniform, normal, randint, multinomial, dropout")
    state = torch.cuda.get_rng_state() if dev.type == "cuda" else torch.get_rng_state()
    a1 = torch.rand(1000, device=dev)
    if dev.type == "cuda":
        torch.cuda.set_rng_state(state)
    else:
        torch.set_rng_state(state)
    a2 = torch.rand(1000, device=dev)
    torch.manual_seed(2024)
    u2 = torch.rand(RANDOM_N, device=dev)
    st.check(torch.equal(a1, a2) and torch.equal(u, u2), "the same seed or generator state gives the same values")

    gen = cpu_gen(16)
    dense = torch.randn(64, 48, generator=gen) * (torch.rand(64, 48, generator=gen) < 0.1)
    rhs = torch.randn(48, 32, generator=gen)
    bias = torch.randn(64, 32, generator=gen)
    other = torch.randn(48, 40, generator=gen) * (torch.rand(48, 40, generator=gen) < 0.2)
    ref = dense.double() @ rhs.double()
    coo = dense.to_sparse().to(dev)
    csr = dense.to(dev).to_sparse_csr()
    r_coo = torch.sparse.mm(coo, rhs.to(dev))
    r_csr = csr @ rhs.to(dev)
    r_add = torch.sparse.addmm(bias.to(dev), coo, rhs.to(dev), beta=0.5, alpha=2.0)
    r_vec = (csr @ rhs[:, :1].to(dev)).squeeze(1)  # one column
    st.out(f"sparse 64x48 nnz {coo._nnz()} (csr {csr.values().numel()}): spmm sum {g(r_coo.sum().cpu(), 5)}, "
           f"addmm sum {g(r_add.sum().cpu(), 5)}")
    errs = [rel_err(r_coo, ref), rel_err(r_csr, ref), rel_err(r_add, 0.5 * bias.double() + 2 * ref),
            rel_err(r_vec, ref[:, 0])]
    if dev.type == "cuda":  # cuSPARSE SpGEMM (CPU builds need MKL for it)
        r_ss = (csr @ other.to(dev).to_sparse_csr()).to_dense()
        st.out(f"sparse CSR @ CSR 64x48x40: sum {g(r_ss.sum().cpu(), 5)}")
        errs.append(rel_err(r_ss, dense.double() @ other.double()))
    st.info["sparse errors"] = [float(f"{e:.3g}") for e in errs]
    st.check(torch.equal(coo.to_dense().cpu(), dense) and torch.equal(csr.to_dense().cpu(), dense)
             and coo._nnz() == csr.values().numel() and max(errs) < 1e-5,
             "COO and CSR: to_dense, spmm, addmm, spmv, CSR @ CSR match the CPU")

    vals_cpu = torch.randint(0, 50, (10000,), generator=gen).float()
    vals = vals_cpu.to(dev)
    sv, si = torch.sort(vals, stable=True)
    sv_ref, si_ref = torch.sort(vals_cpu, stable=True)
    tv, _ = vals.topk(10)
    uq, inv, cnt = torch.unique(vals, return_inverse=True, return_counts=True)
    uq_ref, inv_ref, cnt_ref = torch.unique(vals_cpu, return_inverse=True, return_counts=True)
    cs = vals.cumsum(0)  # integer values: exact in float32 up to 2^24
    tgt = torch.randint(0, 100, (10000,), generator=gen)
    sa = torch.zeros(100, device=dev).scatter_add_(0, tgt.to(dev), vals)
    ia = torch.zeros(100, 3, device=dev).index_add_(0, tgt.to(dev), vals.view(-1, 1).expand(-1, 3).contiguous())
    st.out(f"sort stable: first indices {si[:5].cpu().tolist()}; topk {gl(tv.cpu())}; unique {uq.numel()} "
           f"values, counts first {cnt[:5].cpu().tolist()}; cumsum last {g(cs[-1].cpu())}; "
           f"scatter_add sum {g(sa.sum().cpu())}")
    exact = (torch.equal(sv.cpu(), sv_ref) and torch.equal(si.cpu(), si_ref)
             and torch.equal(tv.cpu(), vals_cpu.topk(10).values)
             and torch.equal(uq.cpu(), uq_ref) and torch.equal(inv.cpu(), inv_ref) and torch.equal(cnt.cpu(), cnt_ref)
             and torch.equal(cs.cpu(), vals_cpu.cumsum(0))
             and torch.equal(sa.cpu(), torch.zeros(100).scatter_add_(0, tgt, vals_cpu))
             and torch.equal(ia.cpu(), torch.zeros(100, 3).index_add_(0, tgt, vals_cpu.view(-1, 1).expand(-1, 3))))
    st.check(exact, "stable sort, topk, unique, cumsum, scatter_add, index_add match the CPU exactly")


def storage_ptr(t):
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


def stage_save_load(st, dev):
    torch.manual_seed(1818)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
    gen = cpu_gen(18)
    model(torch.randn(32, 8, generator=gen).to(dev))  # running statistics that are not the defaults
    model.eval()
    base = torch.arange(20.0, device=dev)
    saved = {"state": model.state_dict(),
             "half": torch.randn(3, 4, generator=gen).to(dev, torch.float16),
             "long": torch.arange(10, device=dev) * 7,
             "bool": torch.arange(9, device=dev) % 3 == 0,
             "base": base, "view": base[2:12:2],
             "cplx": torch.randn(5, dtype=torch.complex64, generator=gen).to(dev)}
    buf = io.BytesIO()
    torch.save(saved, buf)
    st.info["bytes"] = buf.tell()

    def tensors(obj, prefix=""):
        for k, v in obj.items():
            if isinstance(v, dict):
                yield from tensors(v, prefix + k + ".")
            else:
                yield prefix + k, v

    want = dict(tensors(saved))
    for where in (dev.type, "cpu"):
        buf.seek(0)
        back = torch.load(buf, map_location=where)
        got = dict(tensors(back))
        same = (got.keys() == want.keys()
                and all(t.device.type == where and t.dtype == want[k].dtype and t.shape == want[k].shape
                        and torch.equal(t.cpu(), want[k].cpu()) for k, t in got.items()))
        shared = storage_ptr(got["view"]) == storage_ptr(got["base"])
        st.out(f"load map_location={where}: {len(got)} tensors equal with dtypes and shapes: {same}, "
               f"view shares its base's storage: {shared}")
        st.check(same and shared, f"torch.save / torch.load round trip to {where}")
    buf.seek(0)
    restored = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)).to(dev).eval()
    restored.load_state_dict(torch.load(buf, map_location=dev)["state"])
    probe = torch.randn(6, 8, generator=gen).to(dev)
    with torch.no_grad():
        a, b = model(probe), restored(probe)
    st.out(f"restored model output sum {g(b.sum().cpu(), 5)}, equal: {torch.equal(a, b)}")
    st.check(torch.equal(a, b), "a model restored from its state_dict computes the same outputs")


def stage_profiler(st, dev):
    from torch.profiler import ProfilerActivity, profile
    a = torch.randn(256, 256, generator=cpu_gen(30)).to(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(3):
            b = (a @ a).relu()
        if dev.type == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    names = {e.key for e in events}

    def dev_us(e):
        for attr in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(e, attr):
                return getattr(e, attr)
        return 0
    timed = sum(1 for e in events if dev_us(e) > 0)
    st.info["device_timed_events"] = timed
    # Kernel timings come from CUPTI, which instruments the driver itself: through
    # Flyt it reports itself unavailable and the profile keeps operators only.
    st.out(f"profiled: aten::mm seen {'aten::mm' in names}, aten::relu seen {'aten::relu' in names}, "
           f"result sum {g(b.sum().cpu(), 4)}")
    st.check('aten::mm' in names and 'aten::relu' in names, "torch.profiler records the operators it ran")


def stage_distributed(st, dev):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    backend = "nccl" if dev.type == "cuda" else "gloo"
    fd, path = tempfile.mkstemp(prefix="flyt-dist.")
    os.close(fd)
    os.unlink(path)
    dist.init_process_group(backend, init_method=f"file://{path}", rank=0, world_size=1)
    try:
        t = torch.arange(8.0, device=dev)
        dist.all_reduce(t)
        dist.broadcast(t, 0)
        gathered = [torch.zeros(8, device=dev)]
        dist.all_gather(gathered, t)
        dist.barrier()
        st.out(f"{backend}, world size {dist.get_world_size()}: all_reduce/broadcast/all_gather "
               f"{gl(gathered[0].cpu().tolist())}")
        st.check(torch.equal(gathered[0].cpu(), torch.arange(8.0)), f"{backend} collectives on one rank")
        torch.manual_seed(21)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
        ddp = DDP(model, device_ids=[dev.index or 0] if dev.type == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x, y = make_classification(64, 16, 4, 22)
        st.out("DistributedDataParallel training on one rank:")
        train(st, dev, ddp, opt, x.to(dev), y.to(dev), batch=64, steps=10)
    finally:
        dist.destroy_process_group()
        if os.path.exists(path):
            os.unlink(path)


def stage_kernels_jit(st, dev):
    gen = cpu_gen(40)
    x = torch.rand(4096, generator=gen) * 20
    got = torch.special.bessel_j0(x.to(dev)).cpu()  # a jiterator (NVRTC) kernel on CUDA
    err = float((got.double() - torch.special.bessel_j0(x.double())).abs().max())
    st.out(f"bessel_j0 (jiterator) sum {g(got.sum(), 4)}, max error < 1e-4: {err < 1e-4}")
    st.check(err < 1e-4, "jiterated special function matches the CPU")
    if not cuda_only(st, dev, "custom jiterator, Triton or fp8 kernels"):
        return
    fn = torch.cuda.jiterator._create_jit_fn("template <typename T> T fma_one(T x, T y) { return x * y + T(1); }")
    a = torch.randn(1000, generator=gen)
    b = torch.randn(1000, generator=gen)
    r = fn(a.to(dev), b.to(dev)).cpu()
    jerr = float((r.double() - (a.double() * b.double() + 1)).abs().max())
    st.info["custom_jiterator_max_error"] = jerr
    st.out(f"custom jiterator kernel: shape {tuple(r.shape)}, max error < 1e-5: {jerr < 1e-5}")
    st.check(jerr < 1e-5, "custom jiterator kernel")
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                 mask=mask)
    n = 100000
    xs, ys = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    out = torch.empty(n, device=dev)
    axpy[(triton.cdiv(n, 1024),)](xs.to(dev), ys.to(dev), out, n, 2.5, BLOCK=1024)
    ok = torch.allclose(out.cpu(), 2.5 * xs + ys, atol=1e-5)
    st.out(f"triton axpy: sum {g(out.sum().cpu(), 4)}, matches the CPU: {ok}")
    st.check(ok, "a hand-written Triton kernel")
    if torch.cuda.get_device_capability(dev) < (8, 9):
        st.out("no fp8 before compute capability 8.9")
        return
    m = torch.randn(64, 128, generator=gen)
    w = torch.randn(96, 128, generator=gen)
    a8, w8 = m.to(dev).to(torch.float8_e4m3fn), w.to(dev).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=dev)
    prod = torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16).float().cpu()
    ref = a8.float().cpu() @ w8.float().cpu().t()
    rel = float((prod - ref).abs().max() / ref.abs().max())
    st.out(f"fp8 scaled_mm: sum {g(prod.sum(), 3)}, relative error < 1e-2: {rel < 1e-2}")
    st.check(rel < 1e-2, "fp8 matmul (cuBLASLt) matches the CPU")


# Run in a child process: the same interpreter and environment (so through
# Flyt as well when this script is), another allocator configuration.
ALLOC_CHILD = r'''
import json, os, torch
import torch.nn as nn, torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
res = {}
g = torch.Generator().manual_seed(5)
a_cpu = torch.randn(256, 256, generator=g)
a = a_cpu.to(dev)
res["backend"] = torch.cuda.get_allocator_backend()
prod = (a @ a.t()).relu().sum()
ref = (a_cpu.double() @ a_cpu.double().t()).relu().sum()
res["matmul_ok"] = abs(float(prod) - float(ref)) < 1e-5 * abs(float(ref))
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
sizes = (1 << 20, 3 << 20, 12345, 40 << 20)
keep = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
keep[-1].fill_(1)
res["allocated_delta"] = torch.cuda.memory_allocated() - base
res["sizes_sum"] = sum(sizes)
res["big_sum"] = int(keep[-1].sum())
del keep
torch.cuda.synchronize()
res["freed_back"] = torch.cuda.memory_allocated() == base
torch.manual_seed(3)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(256, 32, generator=g).to(dev)
y = x[:, :4].argmax(1)
losses = []
for _ in range(20):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
res["losses"] = [float(v) for v in torch.stack(losses).cpu()]
torch.cuda.synchronize()
res["reserved"] = torch.cuda.memory_reserved()
res["peak"] = torch.cuda.max_memory_allocated()
res["allocated_end"] = torch.cuda.memory_allocated()
# tensors made on worker threads, as loaders of model weights do: a fresh
# thread has no current context, and the allocator grows its segments there
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(4) as pool:
    parts = list(pool.map(lambda i: torch.full((8 << 20,), float(i), device=dev), range(8)))
res["threads_sum"] = float(sum(float(t.double().sum()) for t in parts))
del parts
torch.cuda.empty_cache()
print(json.dumps(res))
'''


def stage_allocator_async(st, dev):
    if not cuda_only(st, dev, "allocator backends"):
        return
    import subprocess
    for conf, backend in (("backend:cudaMallocAsync", "cudaMallocAsync"),
                          ("expandable_segments:True", "native")):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        env.pop("PYTORCH_ALLOC_CONF", None)  # its newer name: only this setting may apply
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", ALLOC_CHILD], env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:  # the other configuration still runs
            st.out(f"{conf}: child did not finish in 120 s")
            st.check(False, f"{conf}: child process ran")
            continue
        st.info[f"{conf} seconds"] = round(time.perf_counter() - t0, 3)
        if proc.returncode != 0:
            st.info[f"{conf} stderr"] = proc.stderr[-2000:]
            st.out(f"{conf}: child exited with {proc.returncode}")
            st.check(False, f"{conf}: child process ran")
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        losses = res["losses"]
        st.info[f"{conf} reserved/peak"] = [res["reserved"], res["peak"]]
        st.out(f"{conf}: backend {res['backend']}, matmul ok {res['matmul_ok']}, allocated +{res['allocated_delta']} B "
               f"for {res['sizes_sum']} B requested, freed back {res['freed_back']}")
        st.out(f"{conf}: losses 0,5,10,15,19: {gl([losses[i] for i in (0, 5, 10, 15, 19)])}")
        st.check(res["backend"] == backend and res["matmul_ok"] and res["big_sum"] == 40 << 20,
                 f"{conf}: allocator backend {backend}, matmul and fill correct")
        # cudaMallocAsync reports the driver pool's own counters: exact return
        # to the base is only required of PyTorch's caching allocator
        st.check(res["allocated_delta"] >= res["sizes_sum"] and (res["freed_back"] or backend != "native")
                 and res["peak"] >= res["allocated_end"] and res["reserved"] > 0,
                 f"{conf}: memory statistics consistent")
        st.check(all(v == v for v in losses) and losses[-1] < losses[0], f"{conf}: training losses fall")
        st.out(f"{conf}: tensors made on 4 worker threads: sum {g(res['threads_sum'], 12)}")
        st.check(res["threads_sum"] == float(sum(range(8)) * (8 << 20)), f"{conf}: worker-thread tensors right")


# A CUDA tensor sent to a spawned process and one sent back, through
# torch.multiprocessing queues: CUDA IPC (memory handles and interprocess
# events) both ways. Each process keeps what it sent alive until the other
# has read it, as PyTorch requires.
MP_CHILD = r"""
import json, torch, torch.multiprocessing as mp

def worker(q_in, q_out):
    t = q_in.get(timeout=120)
    t.add_(1)
    r = t * 2
    torch.cuda.synchronize()
    q_out.put(r)
    q_in.get(timeout=120)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker, args=(q_in, q_out))
    p.start()
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    q_in.put(t)
    r = q_out.get(timeout=120)
    r_sum = float(r.double().sum())
    del r
    q_in.put(None)
    p.join(120)
    print(json.dumps({"t_sum": float(t.double().sum()), "r_sum": r_sum, "exit": p.exitcode}))
"""


def stage_multiprocessing(st, dev):
    if not cuda_only(st, dev, "CUDA tensors between processes"):
        return
    import subprocess
    # a file, not -c: spawned processes import the worker from it
    fd, path = tempfile.mkstemp(prefix="flyt-mp.", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(MP_CHILD)
    n = 1 << 20
    want = n * (n + 1) / 2  # arange + 1, the child's in-place add seen by the parent
    # the caching allocator's blocks go as cudaIpcGetMemHandle handles; with
    # expandable segments, as VMM allocations exported as file descriptors
    try:
        for conf in ("default", "expandable_segments:True"):
            env = dict(os.environ)
            env.pop("PYTORCH_ALLOC_CONF", None)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if conf != "default":
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            try:
                proc = subprocess.run([sys.executable, path], env=env, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                st.check(False, f"{conf}: torch.multiprocessing child finished in 300 s")
                continue
            if proc.returncode != 0:
                st.info[f"{conf} stderr"] = proc.stderr[-2000:]
                st.check(False, f"{conf}: torch.multiprocessing program exited with {proc.returncode}")
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            st.out(f"{conf}: tensor after the child's add_: sum {g(res['t_sum'], 12)}; the child's tensor: "
                   f"sum {g(res['r_sum'], 12)}; child exit {res['exit']}")
            st.check(res["t_sum"] == want and res["r_sum"] == 2 * want and res["exit"] == 0,
                     f"{conf}: a CUDA tensor shared with a spawned process both ways")
    finally:
        os.unlink(path)


def stage_oom(st, dev):
    if not cuda_only(st, dev, "out-of-memory recovery"):
        return
    import gc
    GiB = 1 << 30
    free, total = torch.cuda.mem_get_info()
    base = torch.cuda.memory_allocated()
    try:
        torch.empty(2 * total, dtype=torch.uint8, device=dev)
        st.out("a tensor twice the GPU's memory: allocated (no error)")
        st.check(False, "a tensor larger than the GPU fails")
    except torch.cuda.OutOfMemoryError:
        st.out("a tensor twice the GPU's memory: torch.cuda.OutOfMemoryError")
    keep, ran_out = [], False
    try:
        while len(keep) < 2 * total // GiB:
            keep.append(torch.ones(GiB, dtype=torch.uint8, device=dev))
    except torch.cuda.OutOfMemoryError:
        ran_out = True
    st.info.update(free=free, total=total, gib_tensors=len(keep))
    filled = sum(int(t[::1 << 20].sum().item()) for t in keep[:4])
    st.out(f"1 GiB tensors until the memory ran out: ran out {ran_out}; the first ones read back "
           f"{filled == min(len(keep), 4) * 1024}")
    st.check(ran_out and len(keep) >= free // GiB // 2, "1 GiB tensors fill the GPU, then OOM")
    del keep
    gc.collect()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated()
    x = torch.arange(1 << 20, device=dev, dtype=torch.float64)
    st.out(f"after: allocated back to the start {after == base}; a new tensor sums to {g(x.sum().item(), 12)}")
    st.check(after == base and torch.cuda.mem_get_info()[0] >= free // 2, "all freed, the GPU serves on")


# A program that asks only NVML (PyTorch's NVML-based device count, as vLLM
# does before it forks its workers), then forks: natively NVML does not
# initialise CUDA, so the child uses CUDA. Then the parent itself.
FORK_CHILD = r"""
import json, os, torch
count = torch.cuda.device_count()  # NVML with PYTORCH_NVML_BASED_CUDA_CHECK=1
before = torch.cuda.is_initialized()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        x = torch.arange(1 << 20, dtype=torch.float64, device="cuda")
        out = {"sum": float(x.sum().item())}
    except Exception as e:  # what a broken fork looks like, for the table
        out = {"error": f"{type(e).__name__}: {e}"[:300]}
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = b""
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
parent = float(torch.ones(1000, device="cuda").sum().item())
print(json.dumps({"count": count, "before": before, "child": json.loads(data), "status": status,
                  "parent": parent}))
"""


def stage_fork_nvml(st, dev):
    if not cuda_only(st, dev, "CUDA in a process forked after NVML"):
        return
    import subprocess
    env = dict(os.environ, PYTORCH_NVML_BASED_CUDA_CHECK="1")
    try:
        proc = subprocess.run([sys.executable, "-c", FORK_CHILD], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        st.check(False, "the forking program finished in 300 s")
        return
    if proc.returncode != 0:
        st.info["stderr"] = proc.stderr[-2000:]
        st.check(False, f"the forking program exited with {proc.returncode}")
        return
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    n = 1 << 20
    st.out(f"devices by NVML: {res['count']}; CUDA initialised before the fork: {res['before']}")
    st.out(f"the forked child: {res['child']}; its status {res['status']}; the parent after: {g(res['parent'])}")
    st.check(res["count"] >= 1 and not res["before"], "NVML counted the devices without initialising CUDA")
    st.check(res["child"].get("sum") == n * (n - 1) / 2 and res["status"] == 0,
             "the child forked after NVML uses CUDA")
    st.check(res["parent"] == 1000.0, "the parent uses CUDA after its child")


FUNCS = {name: globals()[f"stage_{name}"] for name in STAGES}


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", default="all", help="all, or a comma-separated list of: " + ", ".join(STAGES))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    wanted = STAGES if args.stage == "all" else [s.strip() for s in args.stage.split(",") if s.strip()]
    bad = [s for s in wanted if s not in STAGES]
    if bad:
        ap.error(f"unknown stage(s): {', '.join(bad)}")
    dev = torch.device(args.device)

    # Deterministic: same kernels and reduction orders in every run.
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except Exception as e:  # older PyTorch: no warn_only
        print(f"(use_deterministic_algorithms not set: {e})", file=sys.stderr)

    report = {"argv": sys.argv[1:], "device": args.device, "stages": []}
    all_ok = True
    for name in STAGES:
        if name not in wanted:
            continue
        st = Stage()
        error = None
        t0 = time.perf_counter()
        try:
            if name == "import":
                t0 = T_START
            FUNCS[name](st, dev)
            if dev.type == "cuda" and name != "import" and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception as e:  # a failed stage is reported; the next ones still run
            error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            st.out(f"ERROR {error}")
            st.ok = False
            traceback.print_exc(file=sys.stderr)
        secs = time.perf_counter() - t0
        all_ok = all_ok and st.ok
        text = "\n".join(st.lines)
        print(f"=== {name}: {'ok' if st.ok else 'FAIL'} ({secs:.3f} s)")
        print(text, flush=True)
        report["stages"].append({"name": name, "ok": st.ok, "seconds": round(secs, 4), "text": text,
                                 "info": st.info, "error": error})
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1, default=str)
            os.replace(tmp, args.json)
    print(f"{'PASS' if all_ok else 'FAIL'} pytorch_check ({time.perf_counter() - T_START:.1f} s)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        if _CACHE_DIR:
            shutil.rmtree(_CACHE_DIR, ignore_errors=True)
    sys.exit(rc)
