"""GRPO and OPD losses on a tiny real Qwen3 model, against brute-force references.

Every reference recomputes each per-token term from scratch from the model's logits with python
loops (log-softmax written out by hand, clipping decided with python ``if``s, aggregation by
explicit sums) and is differentiated separately, so the loss VALUE and its GRADIENT w.r.t. every
model parameter are checked independently of the vectorised implementation.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from replaylab.losses import grpo_loss, opd_full_rkl_loss, opd_sampled_loss

V = 16
P = 3  # prompt length (shared, so no left padding is needed)
LENS = [5, 2, 6, 1]  # valid response lengths, EOS included; a one-token response included
B, T = len(LENS), max(LENS)
NORM_LEN = 8  # Dr. GRPO's constant normaliser (> T, like a response budget)


def tiny_model(seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
        tie_word_embeddings=True,
        initializer_range=0.5,  # the default 0.02 gives near-uniform distributions: weak tests
    )
    return Qwen3ForCausalLM(cfg).double().eval()


@pytest.fixture(scope="module")
def student():
    return tiny_model(0)


@pytest.fixture(scope="module")
def teacher():
    return tiny_model(1)


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(123)
    prompt = torch.randint(0, V, (B, P), generator=g)
    resp = torch.randint(0, V, (B, T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(LENS)[:, None]
    resp = torch.where(mask, resp, 0)  # pad id 0
    noise = 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)  # pushes ratios outside clip
    ref_noise = 0.7 * torch.randn(B, T, generator=g, dtype=torch.float64)
    token_adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    weights = 0.5 + 1.5 * torch.rand(B, T, generator=g, dtype=torch.float64)
    return dict(prompt=prompt, resp=resp, mask=mask, noise=noise, ref_noise=ref_noise,
                token_adv=token_adv, weights=weights)


def response_logits(model, prompt, resp):
    """(B, T, V) logits at the positions that predict each response token."""
    logits = model(input_ids=torch.cat([prompt, resp], dim=1)).logits
    return logits[:, P - 1 : P - 1 + resp.shape[1]]


def gathered_logprobs(logits, ids):
    return torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def hand_logprob(z, y):
    """log softmax(z)[y] written out: z_y - log sum_v exp(z_v)."""
    return z[int(y)] - torch.log(sum(torch.exp(z[v]) for v in range(z.shape[0])))


def param_grad(loss, model):
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True, retain_graph=True)
    return torch.cat([
        (torch.zeros_like(p) if g is None else g).reshape(-1)
        for g, p in zip(grads, model.parameters())
    ])


def brute_aggregate(terms, mode, norm_len=None):
    """terms: list (per sequence) of lists of per-token scalar tensors."""
    if mode in ("grpo", "seq"):
        return sum(sum(ts) / len(ts) for ts in terms if ts) / len(terms)
    total = sum(sum(ts) for ts in terms if ts)
    if mode in ("dapo", "token"):
        return total / sum(len(ts) for ts in terms)
    assert mode == "dr_grpo"
    return total / (len(terms) * norm_len)


# ----------------------------------------------------------------------------- GRPO

SEQ_ADV = torch.tensor([1.3, -0.7, 0.4, -1.1], dtype=torch.float64)

GRPO_CONFIGS = {
    "clip": dict(clip_low=0.2, clip_high=0.28),
    "no_clip": dict(clip_low=None, clip_high=None),
    "dual_clip": dict(clip_low=0.2, clip_high=0.2, dual_clip=1.3),
    "kl": dict(clip_low=0.2, clip_high=0.28, kl_coef=0.3),
    "token_weights": dict(clip_low=0.2, clip_high=0.28, weights=True),
    "token_adv": dict(clip_low=0.2, clip_high=0.2, token_adv=True),
    "everything": dict(clip_low=0.1, clip_high=0.3, dual_clip=1.3, kl_coef=0.5, weights=True,
                       token_adv=True),
}


def grpo_inputs(batch, lp, cfg):
    old = lp.detach() + batch["noise"]
    adv = batch["token_adv"] if cfg.get("token_adv") else SEQ_ADV
    ref = lp.detach() + batch["ref_noise"] if "kl_coef" in cfg else None
    weights = batch["weights"] if cfg.get("weights") else None
    return old, adv, ref, weights


def brute_grpo(logits, batch, old, adv, ref, weights, cfg, aggregation):
    clip_low, clip_high = cfg["clip_low"], cfg["clip_high"]
    dual, beta = cfg.get("dual_clip"), cfg.get("kl_coef", 0.0)
    lo = 1 - clip_low if clip_low is not None else -math.inf
    hi = 1 + clip_high if clip_high is not None else math.inf
    counts = dict(low=0, high=0, dual=0)
    terms = []
    for i in range(B):
        seq = []
        for t in range(LENS[i]):
            lp = hand_logprob(logits[i, t], batch["resp"][i, t])
            a = float(adv[i, t] if adv.dim() == 2 else adv[i])
            r = torch.exp(lp - float(old[i, t]))
            if r.item() < lo:
                r_clip = torch.tensor(lo, dtype=r.dtype)
                counts["low"] += a < 0
            elif r.item() > hi:
                r_clip = torch.tensor(hi, dtype=r.dtype)
                counts["high"] += a > 0
            else:
                r_clip = r
            unclipped, clipped = r * a, r_clip * a
            surr = unclipped if unclipped.item() <= clipped.item() else clipped
            if dual is not None and a < 0 and surr.item() < dual * a:
                surr = torch.tensor(dual * a, dtype=r.dtype)
                counts["dual"] += 1
            if weights is not None:
                surr = surr * float(weights[i, t])
            term = -surr
            if ref is not None:
                d = float(ref[i, t]) - lp
                term = term + beta * (torch.exp(d) - d - 1)
            seq.append(term)
        terms.append(seq)
    return brute_aggregate(terms, aggregation, NORM_LEN), counts


@pytest.mark.parametrize("aggregation", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("name", list(GRPO_CONFIGS))
def test_grpo_matches_brute_force(student, batch, aggregation, name):
    cfg = GRPO_CONFIGS[name]
    logits = response_logits(student, batch["prompt"], batch["resp"])
    lp = gathered_logprobs(logits, batch["resp"])
    old, adv, ref, weights = grpo_inputs(batch, lp, cfg)
    loss, metrics = grpo_loss(
        lp, old, adv, batch["mask"], clip_low=cfg["clip_low"], clip_high=cfg["clip_high"],
        aggregation=aggregation, norm_len=NORM_LEN, token_weights=weights, ref_logprobs=ref,
        kl_coef=cfg.get("kl_coef", 0.0), dual_clip=cfg.get("dual_clip"),
    )
    ref_logits = response_logits(student, batch["prompt"], batch["resp"])  # separate graph
    expected, counts = brute_grpo(ref_logits, batch, old, adv, ref, weights, cfg, aggregation)

    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(param_grad(loss, student), param_grad(expected, student),
                               rtol=1e-8, atol=1e-10)
    n = sum(LENS)
    assert metrics["num_tokens"] == n
    assert metrics["clip_frac_low"] == pytest.approx(counts["low"] / n)
    assert metrics["clip_frac_high"] == pytest.approx(counts["high"] / n)
    # The perturbed old log-probs must actually exercise every clip this config turns on.
    if cfg["clip_low"] is not None:
        assert counts["low"] > 0 and counts["high"] > 0
    if cfg.get("dual_clip") is not None:
        assert counts["dual"] > 0
        assert metrics["dual_clip_frac"] == pytest.approx(counts["dual"] / n)
    if ref is not None:
        lps = [hand_logprob(ref_logits[i, t], batch["resp"][i, t]).item()
               for i in range(B) for t in range(LENS[i])]
        refs = [float(ref[i, t]) for i in range(B) for t in range(LENS[i])]
        k3 = [math.exp(r - l) - (r - l) - 1 for l, r in zip(lps, refs)]
        assert metrics["kl_ref"] == pytest.approx(sum(k3) / n)


def test_grpo_unclipped_on_policy_is_reinforce(student, batch):
    """At old == current (one step per batch) the loss gradient is -mean_t A grad log p."""
    logits = response_logits(student, batch["prompt"], batch["resp"])
    lp = gathered_logprobs(logits, batch["resp"])
    loss, metrics = grpo_loss(lp, lp.detach(), SEQ_ADV, batch["mask"], aggregation="dapo")
    reinforce = -(SEQ_ADV[:, None] * lp)[batch["mask"]].sum() / sum(LENS)
    torch.testing.assert_close(param_grad(loss, student), param_grad(reinforce, student))
    assert metrics["ratio_mean"] == pytest.approx(1.0) and metrics["clip_frac"] == 0.0


# ----------------------------------------------------------------------------- OPD sampled

OPD_CONFIGS = {
    "is": dict(),
    "is_cap": dict(is_cap=1.1),
    "clip": dict(clip_low=0.2, clip_high=0.28),
    "clip_low_only": dict(clip_low=0.2),
    "behaviour_weight": dict(behaviour_weight=True, coef=0.5),
}


def brute_opd(logits, batch, old, teacher_lp, cfg, aggregation):
    coef = cfg.get("coef", 1.0)
    lo = 1 - cfg["clip_low"] if cfg.get("clip_low") is not None else -math.inf
    hi = 1 + cfg["clip_high"] if cfg.get("clip_high") is not None else math.inf
    clipping = "clip_low" in cfg or "clip_high" in cfg
    terms = []
    for i in range(B):
        seq = []
        for t in range(LENS[i]):
            lp = hand_logprob(logits[i, t], batch["resp"][i, t])
            a = coef * (float(teacher_lp[i, t]) - float(old[i, t]))
            w = torch.exp(lp - float(old[i, t]))
            if clipping:
                w_clip = w if lo <= w.item() <= hi else torch.tensor(
                    min(max(w.item(), lo), hi), dtype=w.dtype)
                surr = w * a if (w * a).item() <= (w_clip * a).item() else w_clip * a
            elif "is_cap" in cfg and w.item() > cfg["is_cap"]:
                surr = torch.tensor(cfg["is_cap"] * a, dtype=w.dtype)
            else:
                surr = w * a
            if cfg.get("behaviour_weight"):
                surr = surr * float(batch["weights"][i, t])
            seq.append(-surr)
        terms.append(seq)
    return brute_aggregate(terms, aggregation)


@pytest.mark.parametrize("aggregation", ["dapo", "grpo"])
@pytest.mark.parametrize("name", list(OPD_CONFIGS))
def test_opd_sampled_matches_brute_force(student, teacher, batch, aggregation, name):
    cfg = OPD_CONFIGS[name]
    with torch.no_grad():
        teacher_lp = gathered_logprobs(response_logits(teacher, batch["prompt"], batch["resp"]),
                                       batch["resp"])
    logits = response_logits(student, batch["prompt"], batch["resp"])
    lp = gathered_logprobs(logits, batch["resp"])
    old = lp.detach() + batch["noise"]
    loss, metrics = opd_sampled_loss(
        lp, old, teacher_lp, batch["mask"], coef=cfg.get("coef", 1.0),
        clip_low=cfg.get("clip_low"), clip_high=cfg.get("clip_high"), is_cap=cfg.get("is_cap"),
        behaviour_weight=batch["weights"] if cfg.get("behaviour_weight") else None,
        aggregation=aggregation,
    )
    ref_logits = response_logits(student, batch["prompt"], batch["resp"])
    expected = brute_opd(ref_logits, batch, old, teacher_lp, cfg, aggregation)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(param_grad(loss, student), param_grad(expected, student),
                               rtol=1e-8, atol=1e-10)
    diffs = [hand_logprob(ref_logits[i, t], batch["resp"][i, t]).item() - float(teacher_lp[i, t])
             for i in range(B) for t in range(LENS[i])]
    assert metrics["reverse_kl"] == pytest.approx(sum(diffs) / len(diffs))
    if "is_cap" in cfg:
        assert 0 < metrics["ratio_truncated_frac"] < 1
    if "clip_low" in cfg:
        assert metrics["clip_frac"] > 0


# ----------------------------------------------------------------------------- OPD full RKL


@pytest.mark.parametrize("aggregation", ["dapo", "grpo"])
def test_opd_full_rkl_matches_brute_force(student, teacher, batch, aggregation):
    with torch.no_grad():
        teacher_full = torch.log_softmax(response_logits(teacher, batch["prompt"], batch["resp"]), -1)
    logits = response_logits(student, batch["prompt"], batch["resp"])
    loss, metrics = opd_full_rkl_loss(logits, teacher_full, batch["mask"], aggregation=aggregation,
                                      token_ids=batch["resp"])
    ref_logits = response_logits(student, batch["prompt"], batch["resp"])
    terms, sampled = [], []
    for i in range(B):
        seq = []
        for t in range(LENS[i]):
            z = ref_logits[i, t]
            log_p = [hand_logprob(z, v) for v in range(V)]
            seq.append(sum(torch.exp(lpv) * (lpv - float(teacher_full[i, t, v]))
                           for v, lpv in enumerate(log_p)))
            y = int(batch["resp"][i, t])
            sampled.append(log_p[y].item() - float(teacher_full[i, t, y]))
        terms.append(seq)
    expected = brute_aggregate(terms, aggregation)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(param_grad(loss, student), param_grad(expected, student),
                               rtol=1e-8, atol=1e-10)
    flat = [x.item() for ts in terms for x in ts]
    assert metrics["reverse_kl_exact"] == pytest.approx(sum(flat) / len(flat))
    assert metrics["reverse_kl"] == pytest.approx(sum(sampled) / len(sampled))
    assert min(flat) > 0  # the two models really differ


def test_opd_full_rkl_teacher_zero_mass_stays_finite(student, batch):
    logits = response_logits(student, batch["prompt"], batch["resp"])
    teacher_full = torch.log_softmax(torch.randn(B, T, V, dtype=torch.float64), -1)
    finite_loss, _ = opd_full_rkl_loss(logits, teacher_full, batch["mask"])
    teacher_full[..., 3] = float("-inf")  # e.g. a vocabulary row the teacher masks out
    loss, _ = opd_full_rkl_loss(logits, teacher_full, batch["mask"])
    grad = param_grad(loss, student)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    # The documented behaviour: -inf is treated as the smallest normal probability of the dtype.
    floored = teacher_full.clamp(min=math.log(torch.finfo(torch.float64).tiny))
    log_p = torch.log_softmax(logits.detach(), -1)
    kl = (log_p.exp() * (log_p - floored)).sum(-1)[batch["mask"]]
    assert loss.item() == pytest.approx(kl.mean().item())
    assert loss.item() > finite_loss.item() + 1.0  # ~ pS(3) * 708 nats: large but finite


# ----------------------------------------------------------------------------- estimator identity


def test_opd_sampled_expected_gradient_equals_full_rkl_gradient(student, teacher):
    """Enumerate every 2-token continuation y of a prompt. At theta = theta_old, weighting each
    sequence by its probability pS(y) (through behaviour_weight, with token aggregation over the
    2 * V^2 tokens) turns the sampled loss into its exact expectation over y ~ pS. Its value and
    gradient must equal those of the expected per-position reverse KL on the same prefixes:
    KL(x) + sum_{y1} pS(y1 | x) KL(x, y1), with pS(y1 | x) held fixed (OPD treats the visited
    prefixes as data)."""
    prompt = torch.tensor([[5, 2, 11]])
    grid = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (V^2, 2) all continuations
    prompts = prompt.expand(grid.shape[0], -1)
    mask = torch.ones(grid.shape, dtype=torch.bool)
    with torch.no_grad():
        teacher_logits = response_logits(teacher, prompts, grid)
        teacher_lp = gathered_logprobs(teacher_logits, grid)
    logits = response_logits(student, prompts, grid)
    lp = gathered_logprobs(logits, grid)
    prob = lp.detach().sum(-1).exp()  # pS(y1, y2 | x)
    assert prob.sum().item() == pytest.approx(1.0)
    weight = (prob * grid.numel())[:, None].expand(-1, 2)  # token-mean divides by 2 V^2
    loss, _ = opd_sampled_loss(lp, lp.detach(), teacher_lp, mask, behaviour_weight=weight)

    # Reference: exact KL on the first position and on each distinct second-position prefix.
    def kl(student_z, teacher_z):
        log_p, log_q = torch.log_softmax(student_z, -1), torch.log_softmax(teacher_z, -1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)

    ref_logits = response_logits(student, prompts, grid)
    first = grid[:, 1] == 0  # one row per y1 (rows ordered by y1)
    p_y1 = torch.softmax(ref_logits[0, 0].detach(), -1)
    expected = kl(ref_logits[0, 0], teacher_logits[0, 0]) + (
        p_y1 * kl(ref_logits[first, 1], teacher_logits[first, 1])
    ).sum()
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    g_sampled, g_exact = param_grad(loss, student), param_grad(expected, student)
    assert g_exact.norm() > 1e-2
    # Not 1e-10: Qwen3's RMSNorm computes in float32 even in a float64 model, so the per-row
    # backward passes are rounded to ~1e-7 and the score identity E[grad log p] = 0 holds only
    # to that level (measured ~3e-7 absolute against O(1) gradients).
    torch.testing.assert_close(g_sampled, g_exact, rtol=1e-5, atol=2e-6)


def test_opd_sampled_monte_carlo_gradient_matches_full_rkl(student, teacher):
    """Many y ~ pS(.|x) at one prefix: the plain sampled-loss gradient converges to grad KL.
    Tolerance: 4 standard errors of the estimate, from the exact per-outcome variance."""
    prompt = torch.tensor([[7, 1, 9, 4]])
    n = 50_000
    with torch.no_grad():
        log_q = torch.log_softmax(teacher(input_ids=prompt).logits[0, -1], -1)

    def student_logp():
        return torch.log_softmax(student(input_ids=prompt).logits[0, -1], -1)

    log_p = student_logp()
    samples = torch.multinomial(log_p.detach().exp(), n, replacement=True,
                                generator=torch.Generator().manual_seed(7))
    lp = log_p[samples][:, None]  # (n, 1): n one-token responses sharing the prefix
    loss, metrics = opd_sampled_loss(lp, lp.detach(), log_q[samples][:, None],
                                     torch.ones(n, 1, dtype=torch.bool))
    g_mc = param_grad(loss, student)

    log_p = student_logp()
    p = log_p.exp()
    g_exact = param_grad((p * (log_p - log_q)).sum(), student)
    # Per-outcome gradient of the one-sample estimator: -(log q_y - log p_y) grad log p_y.
    per_y = torch.stack([param_grad(-(log_q[y] - log_p[y].detach()) * log_p[y], student)
                         for y in range(V)])
    pd = p.detach()
    variance = (pd[:, None] * (per_y - g_exact).square()).sum()  # E||g_y - E g||^2
    err = (g_mc - g_exact).norm()
    assert err < 4 * math.sqrt(variance / n)
    assert err < 0.05 * g_exact.norm()
    kl_exact = (pd * (log_p.detach() - log_q)).sum().item()
    assert metrics["reverse_kl"] == pytest.approx(kl_exact, abs=4 * math.sqrt(variance / n) + 0.02)


# ----------------------------------------------------------------------------- masking


def garbage(x, mask, value):
    fill = torch.full_like(x, value)
    return torch.where(mask.reshape(mask.shape + (1,) * (x.dim() - 2)), x, fill)


def scrambled_resp(batch):
    g = torch.Generator().manual_seed(99)
    return torch.where(batch["mask"], batch["resp"], torch.randint(0, V, (B, T), generator=g))


def test_masked_positions_do_not_leak_grpo(student, batch):
    mask = batch["mask"]

    def run(dirty):
        resp = scrambled_resp(batch) if dirty else batch["resp"]
        lp = gathered_logprobs(response_logits(student, batch["prompt"], resp), resp)
        old = lp.detach() + batch["noise"]
        ref = lp.detach() + batch["ref_noise"]
        adv, w = batch["token_adv"], batch["weights"]
        if dirty:
            lp, old = garbage(lp, mask, float("nan")), garbage(old, mask, float("-inf"))
            ref, adv = garbage(ref, mask, float("inf")), garbage(adv, mask, float("nan"))
            w = garbage(w, mask, float("inf"))
        loss, metrics = grpo_loss(lp, old, adv, mask.float(), aggregation="grpo", token_weights=w,
                                  ref_logprobs=ref, kl_coef=0.2, dual_clip=2.0)
        return loss, param_grad(loss, student), metrics

    (l0, g0, m0), (l1, g1, m1) = run(False), run(True)
    assert torch.isfinite(l1) and torch.isfinite(g1).all()
    torch.testing.assert_close(l1, l0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g1, g0, rtol=1e-10, atol=1e-12)
    assert m1 == pytest.approx(m0)


def test_masked_positions_do_not_leak_opd(student, teacher, batch):
    mask = batch["mask"]

    def run(dirty):
        resp = scrambled_resp(batch) if dirty else batch["resp"]
        with torch.no_grad():
            t_logits = response_logits(teacher, batch["prompt"], resp)
        logits = response_logits(student, batch["prompt"], resp)
        lp = gathered_logprobs(logits, resp)
        t_full = torch.log_softmax(t_logits, -1)
        t_lp = gathered_logprobs(t_logits, resp)
        old, bw, ids = lp.detach() + batch["noise"], batch["weights"], resp
        if dirty:
            lp, old = garbage(lp, mask, float("nan")), garbage(old, mask, float("inf"))
            t_lp, bw = garbage(t_lp, mask, float("-inf")), garbage(bw, mask, float("nan"))
            logits, t_full = garbage(logits, mask, float("nan")), garbage(t_full, mask, float("-inf"))
            ids = torch.where(mask, resp, -100)
        sampled, ms = opd_sampled_loss(lp, old, t_lp, mask, clip_low=0.2, clip_high=0.28,
                                       behaviour_weight=bw, aggregation="grpo")
        full, mf = opd_full_rkl_loss(logits, t_full, mask, token_ids=ids)
        return [sampled, full], [param_grad(sampled, student), param_grad(full, student)], [ms, mf]

    (l0, g0, m0), (l1, g1, m1) = run(False), run(True)
    for a, b in zip(l0 + g0, l1 + g1):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    for a, b in zip(m0, m1):
        assert b == pytest.approx(a)
