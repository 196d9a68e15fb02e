"""NCCL through Flyt: one rank (what a single-GPU torch.distributed or DDP
program does). Prints deterministic lines; compare native with Flyt."""
import os
import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
t = torch.arange(8, device="cuda", dtype=torch.float32)
dist.all_reduce(t)
print("all_reduce", t.tolist())
g = [torch.zeros(4, device="cuda")]
dist.all_gather(g, torch.ones(4, device="cuda"))
print("all_gather", g[0].tolist())
dist.broadcast(t, src=0)
dist.barrier()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4).cuda())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16, device="cuda")
for step in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    print("ddp step", step, round(float(loss), 5))
dist.destroy_process_group()
print("done")
