"""A synthetic family of head-level tasks with known structure.

One shared "pretrained" linear head W (K × d).  A task is a pair (activation cluster α,
label block β) plus a mixing weight:
- activations  a = s + c_α + noise: s a direction shared by every task (final-layer
  activations of real LMs are strongly anisotropic: random pairs have cosine ≈ 0.3–0.6),
  c_α a cluster centre, noise isotropic; ``shared``, ``centre`` and ``noise`` are norms;
- labels y: with probability ``p_model`` drawn from the model's own prediction
  softmax(W a) (the part the model already gets right), otherwise from a Zipf law over
  label block β (K/n_blocks consecutive classes) — the part fine-tuning must learn;
- errors e = softmax(W a) − onehot(y).
Tasks that share α share activation geometry; tasks that share β share error geometry;
the Zipf part concentrates the error second moment Γ_e on a few frequent labels, as
next-token errors do.  ``mix`` interpolates both the cluster centre and the label block
between two tasks, so a family spans alignments from near 0 to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class HeadTaskFamily:
    act_dim: int = 64
    out_dim: int = 512
    n_clusters: int = 4
    n_blocks: int = 4
    shared: float = 2.0
    centre: float = 1.5
    noise: float = 2.0
    p_model: float = 0.3
    zipf: float = 1.1
    logit_scale: float = 3.0
    seed: int = 0

    def _gen(self, *salt: int) -> torch.Generator:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + sum((i + 1) * 7919**k for k, i in enumerate(salt)))
        return g

    def head(self) -> Tensor:
        """The shared head W.  (K, d) float32"""
        g = self._gen(1)
        return torch.randn(self.out_dim, self.act_dim, generator=g) * (self.logit_scale / self.act_dim**0.5)

    def centres(self) -> Tensor:
        """Cluster centres, unit norm.  (n_clusters, d)"""
        c = torch.randn(self.n_clusters, self.act_dim, generator=self._gen(2))
        return c / c.norm(dim=1, keepdim=True) * self.centre

    def shared_direction(self) -> Tensor:
        """The offset every task shares.  (d,)"""
        s = torch.randn(self.act_dim, generator=self._gen(4))
        return s / s.norm() * self.shared

    def block_probs(self, block: int) -> Tensor:
        """Zipf law over label block `block`, zero elsewhere.  (K,)"""
        size = self.out_dim // self.n_blocks
        ranks = torch.arange(1, size + 1, dtype=torch.float64)
        perm = torch.randperm(size, generator=self._gen(3, block))  # which labels are frequent
        p = torch.zeros(self.out_dim, dtype=torch.float64)
        p[block * size + perm] = ranks.pow(-self.zipf) / ranks.pow(-self.zipf).sum()
        return p

    def sample(
        self, cluster: int, block: int, n: int, *, seed: int, mix_to: tuple[int, int] | None = None, mix: float = 0.0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """n samples of task (cluster, block), optionally mixed towards task ``mix_to`` by ``mix``.

        Returns (acts (n, d) float32, logits (n, K) float32, labels (n,) int64).
        """
        g = torch.Generator().manual_seed(10_007 * seed + 17)
        c = self.centres()
        centre = c[cluster]
        probs = self.block_probs(block)
        if mix_to is not None:
            centre = (1 - mix) * centre + mix * c[mix_to[0]]
            probs = (1 - mix) * probs + mix * self.block_probs(mix_to[1])
        noise = torch.randn(n, self.act_dim, generator=g) * (self.noise / self.act_dim**0.5)
        acts = self.shared_direction() + centre + noise
        logits = acts @ self.head().T
        own = torch.multinomial(torch.softmax(logits.double(), 1), 1, generator=g).squeeze(1)
        zipf = torch.multinomial(probs, n, replacement=True, generator=g)
        use_model = torch.rand(n, generator=g) < self.p_model
        labels = torch.where(use_model, own, zipf)
        return acts, logits, labels
