"""An ordinary DDP training script with nothing testbed-specific in it (the
guide's "your own script"): the DDP hook test runs it under
hosts.dnn.run_script and, as the baseline, directly with gloo. It saves the
final weights to argv[1]."""
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    dist.init_process_group("gloo")                      # env://: RANK, WORLD_SIZE, MASTER_*
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(steps):
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    torch.save(model.state_dict(), out)
    # gloo's teardown as docs/pytorch.md step 1 says, without the testbed's helper
    # (hosts.dnn.collective.end_process_group): barrier, destroy, a GIL-free pause.
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.2)


if __name__ == "__main__":
    main()
