"""Backends: how each engine's processes start (docs/architecture.md §13).

What a backend is (name, kind, dims, memory model, ...) is a record in
launcher.spec.backend_facts, read without importing anything here. What it does is one class
per backend, a subclass of its kind's base in launcher.backends.kinds:

    ServeBackend   servers(comp, plan, engine, ctx) -> ServerSet; module (`python -m`),
                   client (health, weight push, release/resume: what the recipe calls),
                   checker (argv check with the engine's own parser), inference_options
    TrainBackend   engine_args, engine_env, memory_effects (the estimator's TrainOptions)
    WorkerBackend  workers(comp, plan, worker, ctx, server_addrs)

Every class has `Options` (the dataclass of its config sub-key, `rollout.vllm.*`) and
`refused` (flags its extra_args may not hold). A new backend is one module and one record (or
an entry point naming a record of its own). plan_processes builds every process of a plan from
them; memory_inputs hands the memory model its typed inputs.
"""
