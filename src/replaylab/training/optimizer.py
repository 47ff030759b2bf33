"""The policy's optimizer: AdamW, with float32 master weights for parameters stored in lower precision.

A policy loaded in bfloat16 (`model.dtype`, every real-model preset) has weights of magnitude ~0.02-0.05
whose bf16 spacing is ~1e-4; an Adam step is about `lr` in size, so at the sweeps' lr of 1e-6 plain
AdamW on bf16 parameters rounds almost every update back to the old weight (measured on a tiny Qwen3:
2% of the weights moved in 5 steps at lr 1e-6, against all of them in float32) and every strategy
would look alike. `MasterWeightAdamW` keeps a float32 copy of each such parameter in the optimizer
state (`master`), steps it (moments in float32 too), and rounds the result into the parameter, as
mixed-precision training does; float32 parameters step exactly as `torch.optim.AdamW` (the tiny world's
runs are unchanged). The master copies and moments are optimizer state, so plain and sharded (DCP)
checkpoints carry them and a resume continues from the same float32 values.
"""

from __future__ import annotations

import torch


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW stepping low-precision parameters through float32 masters kept in `state[p]['master']`.

    float32 parameters take torch's own AdamW step. The others take the same update written out here
    (decoupled weight decay, bias-corrected moments; torch's single-tensor formula) on their master, which
    is then rounded into the parameter: elementwise ops only, so it runs on FSDP2's sharded DTensors as
    on plain tensors (swapping a DTensor parameter's storage for a float32 one does not change its dtype).
    """

    @torch.no_grad()
    def step(self, closure=None):
        held = []  # low-precision parameters with a gradient: hidden from torch's step, stepped below
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.dtype != torch.float32:
                    held.append((group, p, p.grad))
                    p.grad = None
        try:
            loss = super().step(closure)
        finally:
            for _, p, grad in held:
                p.grad = grad
        for group, p, grad in held:
            self._master_step(group, p, grad.to(torch.float32))
        return loss

    def _master_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor) -> None:
        if group["amsgrad"] or group["maximize"]:
            raise ValueError("MasterWeightAdamW implements plain AdamW (amsgrad=False, maximize=False)")
        state = self.state[p]
        if "master" not in state:  # the first step: the master starts as the loaded weights
            state["step"] = torch.tensor(0.0)
            state["master"] = p.detach().to(torch.float32, copy=True)
            state["exp_avg"] = torch.zeros_like(state["master"])
            state["exp_avg_sq"] = torch.zeros_like(state["master"])
        master, exp_avg, exp_avg_sq = state["master"], state["exp_avg"], state["exp_avg_sq"]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        state["step"] += 1
        step = state["step"].item()
        master.mul_(1 - lr * group["weight_decay"])
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1**step
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        master.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
        p.copy_(master)  # round to the parameter's precision

    def load_state_dict(self, state_dict: dict) -> None:
        # Optimizer.load_state_dict casts every floating state to its parameter's dtype: that would round
        # the masters and moments of a bf16 parameter to bf16 on every resume. Put the saved float32 back.
        super().load_state_dict(state_dict)
        # saved keys (indices, or FQNs from torch.distributed.checkpoint) pair with parameters as torch pairs them
        keys = [key for group in state_dict["param_groups"] for key in group["params"]]
        params = dict(zip(keys, (p for group in self.param_groups for p in group["params"])))
        for key, saved in state_dict["state"].items():
            p = params[key]
            if p.dtype == torch.float32:
                continue
            for name, value in saved.items():
                if name != "step" and torch.is_tensor(value) and value.dtype == torch.float32:
                    self.state[p][name] = value.to(device=self.state[p][name].device)


def build_optimizer(params: list[torch.nn.Parameter], trainer_cfg) -> torch.optim.Optimizer:
    t = trainer_cfg
    return MasterWeightAdamW(params, lr=t.lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay)
