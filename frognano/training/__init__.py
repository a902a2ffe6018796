"""Training the repair model by reinforcement learning on its own harness (``frognano train``),
and measuring a model on a task set (``frognano eval``).

Reading order: ``loop.py`` (the online loop, top to bottom), ``grpo.py`` (the GRPO variant,
named rule by rule, and its framework-free pieces), ``torch_grpo.py`` / ``mlx_grpo.py`` (that
variant on each backend, behind ``learner.py``), ``rollout.py`` and ``env.py`` (episodes through
the serving harness, scored by the task's tests), ``pool.py`` (tasks synthesised while training
runs), ``rundir.py`` (checkpoints and resume), ``workers.py`` and ``distributed.py`` (where
rollouts and updates run), ``heldout.py`` (the run's held-out curve), and ``evaluate.py`` with
``metrics.py`` (``frognano eval``).  Heavy frameworks are imported only inside the modules that
need them.
"""
