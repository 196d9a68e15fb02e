"""A PyTorch training loop for tests/gpu/migrate_check.sh: a small MLP and a
small CNN trained on fixed synthetic data, deterministic, printing the loss
every 10 steps. Run natively and through Flyt with its session moved
mid-run, the printed lines must be identical. At step 120 a 64 MiB tensor
grows the allocator's memory after the move. With
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the allocator uses the
driver's VMM (cuMemAddressReserve, cuMemCreate, cuMemMap), and the run says
whether its segments were expandable; with backend:cudaMallocAsync it uses
stream-ordered memory, and the run names the allocator backend. With
MIGRATE_TRAIN_GRAPH=1 the whole training step (forward, backward, a
capturable Adam step) is captured once into a CUDA graph and replayed: the
session moves holding a graph exec of PyTorch's kernels. MIGRATE_TRAIN_WIDTH=N
adds an N x N hidden layer (large GEMMs: cuBLAS's cluster kernels).
usage: migrate_train.py [STEPS] [SLEEP_S]"""
import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
x = torch.randn(512, 64, device=dev)
y = (x[:, :8].sum(dim=1, keepdim=True) > 0).float()
img = torch.randn(32, 3, 16, 16, device=dev)
lab = torch.randint(0, 10, (32,), device=dev)
width = int(os.environ.get("MIGRATE_TRAIN_WIDTH", "0"))  # 0: the small MLP
if width:  # a hidden layer of width x width: cuBLAS's large-matrix kernels (clusters on the H100)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                              torch.nn.ReLU(), torch.nn.Linear(width, 1)).to(dev)
else:
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(dev)
cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.AvgPool2d(4), torch.nn.Flatten(),
                          torch.nn.Linear(128, 10)).to(dev)
graphed = os.environ.get("MIGRATE_TRAIN_GRAPH") == "1"
opt = torch.optim.Adam(list(mlp.parameters()) + list(cnn.parameters()), lr=1e-3,
                       capturable=graphed)
bce = torch.nn.BCEWithLogitsLoss()
ce = torch.nn.CrossEntropyLoss()


def train_step():
    opt.zero_grad(set_to_none=False)
    out = bce(mlp(x), y) + ce(cnn(img), lab)
    out.backward()
    opt.step()
    return out


graph = None
if graphed:  # warm up on a side stream, as torch.cuda.graph asks, then capture one step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_loss = train_step()
    print("training step captured in a CUDA graph", flush=True)
for step in range(1, steps + 1):
    if graph is not None:
        graph.replay()
        loss = graph_loss
    else:
        loss = train_step()
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.6f}", flush=True)
    if step == 120:
        big = torch.ones(16 << 20, device=dev)
        print(f"step {step}: grown by {big.numel() * 4} bytes, sum {big.sum().item():.0f}", flush=True)
        del big
    time.sleep(pause)
print(f"memory allocated {torch.cuda.memory_allocated()}")
if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
    segs = torch.cuda.memory_snapshot()
    print(f"expandable segments: {bool(segs) and all(s.get('is_expandable') for s in segs)}")
if "backend:cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
    print(f"allocator backend: {torch.cuda.get_allocator_backend()}")
print("PASS")
