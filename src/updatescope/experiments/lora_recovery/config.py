"""``lora-recovery``'s config: recovery after forgetting with LoRA on the packaged model.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    LoRAConfig,
    check_names,
    check_positive,
    check_seed,
)

#: the tasks of ``lora-recovery``: code, prose, an encyclopedia topic, molecules
LORA_RECOVERY_TASKS = ("code_email", "news_lee", "wiki_people", "smiles_nci_tpsa_low")


@dataclass(frozen=True)
class LoRARecoveryConfig:
    """``lora-recovery``: paper B's recovery after forgetting with LoRA on the packaged model.

    LoRA (``lora``: rank, scaling, targets -- the tail's attention projections -- and the
    multitask phase: Adam at ``lora.lr`` for ``lora.steps`` steps of ``lora.batch`` sequences of
    ``lora.seq_len`` tokens per task) on the last ``lora.n_last`` blocks, run on cached block
    inputs.  Each task keeps ``train_tokens`` counted targets of its train split for training
    and measurement batches and ``eval_tokens`` of its eval split for the eval loss.
    Forgetting: Adam at ``forget_lr`` on ``focus`` until the other tasks' mean eval loss has
    risen by ``forget_rise`` nats over theta_mt (checked every ``forget_eval_every`` steps, at
    most ``forget_cap`` steps); a replicate that stops at the cap without the rise is recorded
    with its reasons and left out of the summary.  Recovery: SGD on the mix at eta =
    ``eta_lambda`` / rho(theta_forg) for ``recover_steps`` steps, the first ``dense_steps`` of
    them kept for the prefix bases; rho, the spectral radius of the mix-loss Hessian, is the
    largest of ``eta_draws`` power iterations on independent Hessian batches of
    ``hessian_batch`` sequences per task, each of at most ``power_iters`` HVPs and stopped by
    the lab's convergence checks (``power_rtol``, ``power_residual_tol``); a replicate whose
    largest draw did not converge is left out of the summary too.  ``seeds`` replicates draw
    fresh forgetting, recovery and measurement minibatches; with ``vary_theta_mt`` replicate r
    also trains its own theta_mt (LoRA initialisation seed + r, its own multitask batches)."""

    model: str = "smollm2"
    tasks: tuple[str, ...] = LORA_RECOVERY_TASKS
    focus: str = "smiles_nci_tpsa_low"
    lora: LoRAConfig = LoRAConfig(
        n_last=2,
        r=8,
        alpha=16,
        targets=("q_proj", "k_proj", "v_proj", "o_proj"),
        lr=2e-3,
        steps=120,
        batch=4,
        seq_len=64,
    )
    train_tokens: int = 32768  # >= 2 x plane_batch sequences of 64 tokens, where the split has them
    eval_tokens: int = 512
    forget_lr: float = 3e-3
    forget_cap: int = 200
    forget_rise: float = 0.3
    forget_eval_every: int = 5
    recover_steps: int = 100
    dense_steps: int = 30
    eta_lambda: float = 1.0
    hessian_batch: int = 4
    power_iters: int = 100  # at most this many HVPs per power iteration (its checks stop it earlier)
    eta_draws: int = 3  # Hessian batches at theta_forg; eta from the largest spectral radius
    power_rtol: float = 1e-3  # power iteration: relative change of the Rayleigh quotient, and ...
    power_residual_tol: float = 0.05  # ... eigenvector residual ||Hv - rq v|| / |rq|, both to converge
    recover_eval_every: int = 5
    # task plane, resample floor and drift: gradients of plane_batch sequences per task (two
    # draws at each point, disjoint while the task has 2 x plane_batch sequences, else sampled
    # with replacement and recorded so); each draw is accumulated over batches_per_task / 2
    # micro-batches, whose gradients span the static planes (width tasks x batches_per_task)
    batches_per_task: int = 8
    plane_batch: int = 256
    rank_n: int = 100  # per-sequence gradients per task for the effective rank
    drift_steps: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
    # 3, not the synthetic lab's 5: a full replicate takes about 25 minutes on 2 cores (more with
    # the floor at every drift step); refused replicates are listed, so a record says how many count
    seeds: int = 3
    # replicate r trains its own theta_mt (LoRA initialisation seed + r, multitask batches of its
    # own), so the replicates' spread covers the multitask phase too; False shares seed's theta_mt
    vary_theta_mt: bool = True
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_names(self.tasks, "tasks", 2)
        if self.focus not in self.tasks:
            raise InputError(f"focus {self.focus!r} must be one of the tasks {list(self.tasks)}")
        check_positive(
            self,
            "train_tokens",
            "eval_tokens",
            "forget_lr",
            "forget_cap",
            "forget_rise",
            "forget_eval_every",
            "recover_steps",
            "dense_steps",
            "hessian_batch",
            "power_iters",
            "eta_draws",
            "power_rtol",
            "power_residual_tol",
            "recover_eval_every",
            "batches_per_task",
            "plane_batch",
            "seeds",
        )
        check_seed(self.seed)
        if not 0 < self.eta_lambda < 2:
            raise InputError(f"eta_lambda must lie in (0, 2) for stable gradient descent, got {self.eta_lambda}")
        if self.dense_steps > self.recover_steps:
            raise InputError(f"dense_steps={self.dense_steps} exceeds recover_steps={self.recover_steps}")
        if self.rank_n < 2:
            raise InputError(f"rank_n must be >= 2, got {self.rank_n}")
        if self.batches_per_task % 2 or self.batches_per_task // 2 > self.plane_batch:
            raise InputError(
                f"batches_per_task must be even (half per draw) and at most 2 x plane_batch="
                f"{2 * self.plane_batch}, got {self.batches_per_task}"
            )
        if not self.drift_steps or any(not 1 <= k <= self.recover_steps for k in self.drift_steps):
            raise InputError(
                f"drift_steps must lie in 1..recover_steps={self.recover_steps}, got {list(self.drift_steps)}"
            )
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> LoRARecoveryConfig:
        if quick:
            # 2 shared CPU cores (about 8 minutes): sequences of 8 tokens so that gradients of 256
            # sequences stay affordable (the LM head over the whole vocabulary dominates), >= 512
            # sequences per task, short phases, 3 replicates (each with its own theta_mt), drift
            # at the two steps the docs use (each needs two plane draws: the drift and its floor),
            # power iterations capped at 30 HVPs (they converged in 7-14 on a probe)
            return cls(
                lora=LoRAConfig(
                    n_last=2,
                    r=4,
                    alpha=8,
                    targets=("q_proj", "k_proj", "v_proj", "o_proj"),
                    lr=3e-3,
                    steps=40,
                    batch=8,
                    seq_len=8,
                ),
                train_tokens=4096,
                eval_tokens=128,
                forget_cap=40,
                forget_rise=0.2,
                recover_steps=30,
                dense_steps=20,
                power_iters=30,
                eta_draws=3,
                hessian_batch=8,
                batches_per_task=8,
                plane_batch=256,
                rank_n=100,
                drift_steps=(10, 30),
                seeds=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
