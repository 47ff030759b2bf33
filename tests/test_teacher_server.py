"""ServerTeacher against a local fake vLLM completions server (CPU), and against a real
`vllm serve` process (gpu-marked, skipped without CUDA and vllm).

The fake server (http.server on 127.0.0.1, random port) answers in vLLM's response format
(`choices[i].prompt_logprobs[j] = {"<token id>": {"logprob", "rank", "decoded_token"}}`, None at
position 0) with the log-probs of a real tiny transformers model, computed per sequence without
padding. The scorer must reproduce LocalTeacher's batched, left-padded scores on the same samples.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.hf import HFGenerator
from replaylab.teacher.local import LocalTeacher
from replaylab.teacher.server import ServerTeacher, TeacherServerError
from replaylab.types import Prompt

QUESTIONS = ["1+2=", "What is 7*8?", "12-5", "9", "Solve 3+4+5 please"]


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def qwen3(tok, seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      initializer_range=0.3)  # peaked distributions: a misaligned position shows
    return Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def teacher(tok):
    return qwen3(tok, 1)


def prompts(tok) -> list[Prompt]:
    out = []
    for i, q in enumerate(QUESTIONS):
        text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        out.append(Prompt(f"q{i}", text, tuple(tok.encode(text)), "0"))
    return out


@pytest.fixture
def samples(tok):
    """Student rollouts of different prompt and response lengths (some truncated, some EOS)."""
    torch.set_num_threads(1)
    gen = HFGenerator(qwen3(tok, 0), tok)
    groups = gen.generate(prompts(tok), SamplingParams(max_new_tokens=12, temperature=1.0, n=2), seed=3)
    return [s for g in groups for s in g]


class FakeVLLM:
    """A threaded HTTP server that speaks vLLM's /v1/completions with prompt_logprobs."""

    def __init__(self, model: torch.nn.Module, served_name: str = "teacher", tokenizer=None):
        self.model, self.served_name, self.tokenizer = model, served_name, tokenizer
        self.bodies: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                status, reply = fake.answer(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/tokenize" and self.tokenizer is not None:  # vLLM serves it beside /v1, not under it
            if body.get("model") != self.served_name:
                return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist."}
            ids = self.tokenizer.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
            return 200, {"count": len(ids), "max_model_len": 512, "tokens": ids, "token_strs": None}
        if path != "/v1/completions":
            return 404, {"object": "error", "message": f"no route {path}"}
        if body.get("model") != self.served_name:
            return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist."}
        choices = []
        for i, ids in enumerate(body["prompt"]):
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            entries = [None] + [
                {str(ids[j]): {"logprob": float(logp[j - 1, ids[j]]), "rank": 1, "decoded_token": "x"}}
                for j in range(1, len(ids))
            ]
            choices.append({"index": i, "text": "x", "logprobs": None, "finish_reason": "length",
                            "stop_reason": None, "prompt_logprobs": entries})
        choices.reverse()  # order must come from "index", not from position
        return 200, {"id": "cmpl-1", "object": "text_completion", "model": self.served_name, "choices": choices,
                     "usage": {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 1}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(teacher, tok):
    server = FakeVLLM(teacher, tokenizer=tok)
    yield server
    server.close()


@pytest.mark.parametrize("micro_batch,concurrency", [(256, 1), (3, 3)])
def test_server_scores_equal_local_teacher(tok, teacher, samples, fake, micro_batch, concurrency):
    local_samples = [s.replayed("fresh") for s in samples]
    LocalTeacher(teacher, tok.pad_token_id).score(local_samples)
    scorer = ServerTeacher(fake.url, "teacher", micro_batch=micro_batch, concurrency=concurrency)
    scorer.score(samples)
    assert len(fake.bodies) == -(-len(samples) // micro_batch)  # batched requests
    body = fake.bodies[0]
    assert body["max_tokens"] == 1 and body["prompt_logprobs"] == 0 and isinstance(body["prompt"][0][0], int)
    for s, ref in zip(samples, local_samples):
        assert s.teacher_logprobs.shape == (s.num_tokens,)
        assert torch.allclose(s.teacher_logprobs, ref.teacher_logprobs, atol=1e-5), (s.teacher_logprobs, ref.teacher_logprobs)
    assert scorer.tokens_scored == sum(s.num_tokens for s in samples)
    assert not ServerTeacher.provides_full


def test_only_unscored_samples_are_sent(samples, fake):
    scorer = ServerTeacher(fake.url, "teacher", micro_batch=4)
    scorer.score(samples[:3])
    first = [s.teacher_logprobs for s in samples[:3]]
    n_requests = len(fake.bodies)
    scorer.score(samples[:3])  # all cached: no request
    assert len(fake.bodies) == n_requests
    scorer.score(samples)  # only the rest is sent
    assert sum(len(b["prompt"]) for b in fake.bodies) == len(samples)
    assert all(a is s.teacher_logprobs for a, s in zip(first, samples[:3]))
    assert scorer.tokens_scored == sum(s.num_tokens for s in samples)


def test_clear_errors(samples, fake):
    with pytest.raises(ValueError, match="full-vocabulary"):
        ServerTeacher(fake.url, "teacher").score(samples, full=True)
    with pytest.raises(TeacherServerError, match="HTTP 404.*does not exist"):
        ServerTeacher(fake.url, "wrong-name").score(samples[:1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with pytest.raises(TeacherServerError, match="unreachable after 1 attempts"):
        ServerTeacher(f"http://127.0.0.1:{dead}", "teacher", retries=0, timeout_s=5).score(samples[:1])
    with pytest.raises(ValueError, match="server URL"):
        ServerTeacher("", "teacher")
    assert ServerTeacher("http://h:8000/", "m").base_url == "http://h:8000/v1"


def server_config(url: str, *extra: str):
    from conftest import compose
    from replaylab.config import to_object

    return to_object(compose(["trainer=opd_sampled", "teacher.kind=server", f"teacher.server_url={url}",
                              "teacher.name_or_path=teacher", *extra]))


def test_build_refuses_full_rkl_with_a_server_teacher(tok, fake):
    # The refusal happens when the config is checked, before any model loads (config_checks.check_teacher).
    from conftest import compose
    from replaylab.config import ConfigError, to_object
    from replaylab.objectives import build_objective
    from replaylab.training.build import build_teacher

    server = ["teacher.kind=server", f"teacher.server_url={fake.url}", "teacher.name_or_path=teacher"]
    with pytest.raises(ConfigError, match="opd_sampled"):
        to_object(compose(server))
    cfg = server_config(fake.url)
    objective = build_objective(cfg.trainer, cfg.budget.max_response_tokens, cfg.rollout.temperature)
    assert isinstance(build_teacher(cfg, objective, torch.device("cpu"), tok), ServerTeacher)
    # Built only after the server tokenized a probe into the student's ids, special tokens as written.
    (probe,) = fake.bodies
    assert probe["add_special_tokens"] is False and "<|im_end|>" in probe["prompt"] and "\\boxed" in probe["prompt"]


def other_tokenizer(order: str, unsplit: tuple[str, ...]):
    """The tiny world's vocabulary under another model's tokenizer: characters in `order` ("reversed":
    other ids), and only the markers in `unsplit` kept whole; the others split into characters, as a
    base model's tokenizer splits chat markers it does not know."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from replaylab.models.tiny_tokenizer import SPECIAL_TOKENS

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    chars = chars[::-1] if order == "reversed" else chars
    inner = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(SPECIAL_TOKENS + chars)}, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    inner.decoder = decoders.Fuse()
    inner.add_special_tokens(["<pad>", "<unk>", *unsplit])
    return PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="<pad>", unk_token="<unk>")


ALL_MARKERS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


@pytest.mark.parametrize("order,unsplit,where", [
    ("reversed", ALL_MARKERS, "token 1, around '<|im_start|>user"),  # another vocabulary
    ("same", ("<|endoftext|>",), "token 0"),  # a base model's tokenizer: no chat markers
    ("same", ALL_MARKERS[:2], "token 171, around '<pad> <|im_start|> <|endoftext|>' (server id 84, student id 4)"),  # one marker missing, at the end
])
def test_a_server_with_another_tokenizer_is_refused_before_training(tok, teacher, samples, order, unsplit, where):
    """Served by another tokenizer, the student's ids still score without complaint (every id is in range):
    before the check such a teacher trained the student on meaningless log-probs."""
    from replaylab.objectives import build_objective
    from replaylab.training.build import build_teacher

    server = FakeVLLM(teacher, tokenizer=other_tokenizer(order, unsplit))
    try:
        ServerTeacher(server.url, "teacher").score(samples[:2])  # the silent failure the check exists for
        assert samples[0].teacher_logprobs.isfinite().all()
        cfg = server_config(server.url)
        objective = build_objective(cfg.trainer, cfg.budget.max_response_tokens, cfg.rollout.temperature)
        with pytest.raises(TeacherServerError, match=f"tokenizes differently from the student.*{re.escape(where)}"):
            build_teacher(cfg, objective, torch.device("cpu"), tok)
    finally:
        server.close()


def test_the_tokenizer_check_names_what_is_wrong(tok, teacher):
    server = FakeVLLM(teacher, tokenizer=None)  # a server without /tokenize: not vLLM
    try:
        with pytest.raises(TeacherServerError, match="check the teacher server's tokenizer.*HTTP 404.*beside /v1"):
            ServerTeacher(server.url, "teacher").check_tokenizer(tok)
    finally:
        server.close()
    server = FakeVLLM(teacher, tokenizer=tok)
    try:
        with pytest.raises(TeacherServerError, match="does not exist"):
            ServerTeacher(server.url, "wrong-name").check_tokenizer(tok)
        ServerTeacher(server.url.removesuffix("/v1"), "teacher").check_tokenizer(tok)  # a URL without /v1 too
    finally:
        server.close()


# ------------------------------------------------------------------ real vLLM server (GPU)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm extra (pip install replaylab[vllm])")
def test_real_vllm_server_matches_local_teacher(tok, samples, tmp_path):
    """`vllm serve` on the tiny world's teacher; its prompt log-probs must match transformers'."""
    from replaylab.models.loading import load_causal_lm, resolve_path
    from replaylab.models.tiny_spec import TinyWorldConfig

    path = resolve_path("tiny://teacher", TinyWorldConfig(teacher_steps=60, student_step=30), progress=False)
    port = _free_port()
    log = open(tmp_path / "vllm.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", "teacher",
         "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", "512",
         "--gpu-memory-utilization", "0.2", "--enforce-eager"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
    try:
        deadline = time.time() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited ({proc.returncode}):\n{(tmp_path / 'vllm.log').read_text()[-4000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail("vllm serve did not come up in 10 minutes")
                time.sleep(2)
        local_samples = [s.replayed("fresh") for s in samples]
        LocalTeacher(load_causal_lm(path, "float32"), tok.pad_token_id).score(local_samples)
        served = ServerTeacher(f"http://127.0.0.1:{port}/v1", "teacher", micro_batch=4)
        served.check_tokenizer(tok)  # vLLM's own /tokenize gives the student's ids
        served.score(samples)
        for s, ref in zip(samples, local_samples):
            assert torch.allclose(s.teacher_logprobs, ref.teacher_logprobs, atol=2e-3), (s.teacher_logprobs, ref.teacher_logprobs)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def test_a_teacher_server_moved_to_another_node_keeps_the_run_directory():
    """After a preemption the `vllm serve` teacher usually comes back on another node: the resubmitted run
    with the new URL must resume its directory, not start over beside it (scale-out audit, item 5). What the
    teacher is (its name, its kind) still names the run."""
    from conftest import compose

    from replaylab.training.runs import config_hash

    base = ["trainer=opd_sampled", "teacher.kind=server", "teacher.name_or_path=t"]
    node17, node42, other = (compose(base[:-1] + [f"teacher.server_url=http://{host}:8000/v1", name])
                             for host, name in (("node17", base[-1]), ("node42", base[-1]), ("node42", "teacher.name_or_path=u")))
    assert config_hash(node17) == config_hash(node42) != config_hash(other)
