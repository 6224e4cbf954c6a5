"""The deep-learning layer (PyTorch, CPU build): models, data, device model,
the testbed collectives on tensors, a DDP communication hook, and the helpers
a user's training script calls on a `kind: torch` workload.

Modules (import the one you need; each imports torch):
    lenet       LeNet-class CNN on scikit-learn's bundled 8x8 digits
    ncf         NCF on seeded synthetic interactions (+ MovieLens-format loader)
    lstm        small LSTM language model on seeded synthetic text
    data        shared helpers: seeded splits, per-rank shards, batches
    config      the torch worker's JSON config (strict)
    runtime     the worker process's device, collective, trace and records
    device      FLOPs per layer from the model, accelerator peak x efficiency
    collective  the scenario's collective (ring | ps | switch) on tensors
    ddp_hook    DistributedDataParallel communication hook over it
    report      per-iteration records (loss, accuracy, compute/comm time)
    run_script  the host program that runs a user's script on every worker
"""
