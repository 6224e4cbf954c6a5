"""Example training script for `kind: torch` scenarios: LeNet on digits, NCF on
synthetic interactions (or a MovieLens file), or an LSTM language model on
synthetic text; data-parallel, either with DDP (the testbed routes its gradient
buckets through the scenario's collective) or as a plain loop that averages the
parameters after every step (`--mode average`, one call per step).

It is an ordinary PyTorch script: the testbed sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; `hosts.dnn.report` records each iteration (and
does nothing when the script runs without the testbed).

    python scenarios/torch/train.py --model lenet --epochs 2     # on the testbed via the scenario
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hosts.dnn import collective, report
from hosts.dnn.data import batches, shard, split
from hosts.dnn.ddp_hook import init_process_group


def build(name: str, seed: int, movielens: str | None):
    """(model, train batches(epoch) -> list of (inputs, target), loss_fn, eval_fn, sample inputs)"""
    if name == "lenet":
        from hosts.dnn import lenet
        train, test = lenet.digits(seed)
        model = lenet.LeNet()
        return (model, lambda idx: ((train.x[idx],), train.y[idx]), len(train),
                F.cross_entropy, lambda m: lenet.accuracy(m, test), (train.x[:2],))
    if name == "ncf":
        from hosts.dnn import ncf
        data = ncf.load_movielens(movielens, seed) if movielens else ncf.synthetic(seed)
        train, test = ncf.train_test(data, seed)
        model = ncf.NCF(data.n_users, data.n_items, dim=8)
        return (model, lambda idx: ((train.users[idx], train.items[idx]), train.labels[idx]), len(train),
                F.binary_cross_entropy_with_logits, lambda m: ncf.accuracy(m, test),
                (train.users[:2], train.items[:2]))
    if name == "lstm":
        from hosts.dnn import lstm
        x, y = lstm.windows(lstm.synthetic_text(seed, length=20_000), 32)
        tr, te = split(len(x), seed, 0.2)
        model = lstm.LSTMLM()
        return (model, lambda idx: ((x[tr][idx],), y[tr][idx]), len(tr),
                lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1)),
                lambda m: lstm.accuracy(m, x[te], y[te]), (x[:2],))
    raise SystemExit(f"unknown --model {name!r} (lenet, ncf, lstm)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="lenet", choices=["lenet", "ncf", "lstm"])
    p.add_argument("--mode", default="ddp", choices=["ddp", "average"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--batch-size", type=int, default=int(os.environ.get("TESTBED_BATCH_SIZE", 32)),
                   help="per worker (default: the workload's batch_size)")
    p.add_argument("--optimizer", default=None, choices=["sgd", "adam"],
                   help="default: sgd (momentum 0.9) for lenet, adam for ncf and lstm")
    p.add_argument("--lr", type=float, default=None, help="default: 0.05 (lenet, ncf), 0.01 (lstm)")
    p.add_argument("--seed", type=int, default=int(os.environ.get("TESTBED_SEED", 1)))
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP's bucket_cap_mb (default: DDP's, 25)")
    p.add_argument("--movielens", default=None, help="ncf: a ratings.dat / u.data file instead of synthetic data")
    a = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    torch.manual_seed(a.seed)                    # the same initial weights on every rank
    model, get, n_train, loss_fn, evaluate, sample = build(a.model, a.seed, a.movielens)
    report.profile(model, *sample)               # FLOPs per layer for the device model
    averaging = a.mode == "average" and (report.on_testbed() or world > 1)
    if a.mode == "ddp" or (averaging and not report.on_testbed()):
        init_process_group()                     # gloo, rendezvous at MASTER_ADDR:MASTER_PORT
    if a.mode == "ddp":
        net = DDP(model, **({"bucket_cap_mb": a.bucket_cap_mb} if a.bucket_cap_mb else {}))   # buckets: the collective
    else:
        net = model
    optimizer = a.optimizer or ("sgd" if a.model == "lenet" else "adam")
    lr = a.lr if a.lr is not None else (0.01 if a.model == "lstm" else 0.05)
    opt = (torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(net.parameters(), lr=lr))
    mine = shard(torch.arange(n_train), rank, world)

    step_no = 0
    for epoch in range(a.epochs):
        for idx in batches(mine, a.batch_size, a.seed + rank, epoch):
            inputs, target = get(idx)

            def step():
                opt.zero_grad()
                loss = loss_fn(net(*inputs), target)
                loss.backward()
                opt.step()
                return loss.item()
            loss = report.compute(step, len(idx))
            if averaging:       # the plain loop's one call: average (off the testbed: torch.distributed's)
                flat = parameters_to_vector(model.parameters())
                vector_to_parameters(collective.allreduce_(flat), model.parameters())
            acc = evaluate(model) if step_no % a.eval_every == 0 else None
            report.iteration(loss=loss, acc=acc, epoch=epoch)
            step_no += 1
            if a.max_steps and step_no >= a.max_steps:
                break
        if a.max_steps and step_no >= a.max_steps:
            break
    final = evaluate(model)
    if rank == 0:
        print(f"final accuracy {final:.4f} after {step_no} steps", flush=True)
    report.final(acc=final, steps=step_no)


if __name__ == "__main__":
    main()
