"""Backends: one module per backend, each owning every fact about its engine
(docs/architecture.md, "Backends").

A backend module says what it accepts and how its processes start:

    NAME      "vllm", "sglang", "fsdp", "megatron", "archon"
    KIND      launcher.spec.registry.SERVE (servers) or TRAIN (torchrun workers)
    DIMS      the dims its backend string takes ("dtp"); HYBRID: takes the MoE attn/ffn form
    EXAMPLE   a backend string to show in hints
    ORDER     where it is listed among its kind (errors suggest the first that fits)
    Options   the dataclass of its config sub-key (`rollout.vllm.*`, `actor.fsdp.*`, ...);
              an optional `problem()` says what is wrong with a value (checked at plan time)
    REFUSED   flags its `extra_args` may not hold (flag -> how to fix)
    INSTALL   the package its processes import first and how to install it (preflight)
    MEMORY_MODEL, MEMORY_KEYS  how memory/ sizes it, and which of its options set the
              estimator's knobs (the fixes the memory check suggests name them)
    serve:    servers(comp, plan, engine, ctx) -> ServerSet; MODULE (`python -m` entry);
              CLIENT (health, weight push, release/resume: what the recipe calls); CHECKER
              (argv check with the engine's own parser); inference_options(options, release)
    train:    engine_args(comp, options) -> flags; engine_env(device) -> env defaults;
              train_options(options, base) -> the estimator's TrainOptions

The protocols of each kind are in launcher.backends.protocol; callers use its accessors
(`serve_backend(name)`, `train_backend(name)`), so mypy checks every call into a backend.

They are found through launcher.spec.registry (built-ins and the `areal_launch.backends`
entry points), imported on first use. The grammar (launcher.spec.alloc) and the config schema
(launcher.config.schema) read their tables from there.
"""
