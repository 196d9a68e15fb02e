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
  memory      caching-allocator statistics after a fixed allocation pattern

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
          "compile", "memory", "cuda_graphs"]


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
