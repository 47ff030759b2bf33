"""`ServerTeacher`: teacher log-probs of student responses from a vLLM OpenAI-compatible server.

A big teacher (Qwen3-8B, 30B-A3B) runs as its own `vllm serve` process, on its own GPUs, shared by
any number of trainer ranks; this client only sends token ids and reads log-probs back. It uses the
completions endpoint with vLLM's `prompt_logprobs` extra parameter:

    POST {server_url}/completions
    {"model": ..., "prompt": [[prompt ids + response ids], ...], "max_tokens": 1,
     "prompt_logprobs": 0, "temperature": 1.0}

`prompt_logprobs=0` returns, for every prompt position, the log-prob of the token actually there
(plus none of the top alternatives), keyed by token id: `choices[i].prompt_logprobs[j] ==
{"<id_j>": {"logprob": ..., "rank": ..., "decoded_token": ...}}`, `None` at position 0. These are
log-softmax of the raw logits at temperature 1 whatever the server's `logprobs_mode` (vLLM's docs:
prompt tokens do not go through the sampling processors), i.e. exactly what `LocalTeacher` computes.
`max_tokens=1` (one throwaway sampled token) rather than 0: vLLM only accepts 0 together with
`echo=true`, which would also make the server detokenize and return the whole prompt text.
Token ids go in as ids (a list of ints is a valid `prompt`), so no tokenizer round trip can shift
positions. Only the standard library is used (urllib, json, a thread pool).

Ids are only meaningful under the tokenizer that made them, and a server started on the wrong model
(a base model without the chat tokens, another family) scores the student's ids without complaint:
every id is in range and `prompt_logprobs` keys each position by the id it was sent. So before
training, `check_tokenizer` sends a probe text through vLLM's `POST /tokenize` (served beside /v1)
and refuses the server unless it returns exactly the student's ids for it.

The exact full-vocabulary reverse KL (`trainer.objective=opd_full_rkl`) cannot be computed from a
server (it would need V log-probs per token): `provides_full` is False, and `build.py` refuses that
combination up front.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import torch

from replaylab.teacher.base import unscored
from replaylab.types import Sample


class TeacherServerError(RuntimeError):
    """The teacher server could not be reached or answered something unusable."""


class ServerTeacher:
    provides_full = False

    def distribution_model(self) -> None:
        """No local model: the server returns sampled-token log-probs only."""
        return None

    def __init__(self, url: str, model_name: str, micro_batch: int = 256, concurrency: int = 4,
                 timeout_s: float = 600.0, retries: int = 3, api_key: str | None = None):
        """`url`: the server's OpenAI base URL, e.g. http://host:8000/v1 (a URL without /v1 gets it
        appended). `model_name`: the served model name (`vllm serve NAME` or --served-model-name).
        `micro_batch`: sequences per request; `concurrency`: requests in flight (the server batches
        them together); failed requests are retried `retries` times with backoff."""
        if not url:
            raise ValueError("ServerTeacher needs the server URL (teacher.server_url), e.g. http://host:8000/v1")
        url = url.rstrip("/")
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.model_name = model_name
        self.micro_batch = micro_batch
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.retries = retries
        self.api_key = api_key
        self.tokens_scored = 0
        self.requests_sent = 0

    # ------------------------------------------------------------------ protocol
    def score(self, samples: list[Sample], full: bool = False) -> None:
        if full:
            raise ValueError("ServerTeacher cannot return full-vocabulary log-probs (the exact reverse KL needs them); "
                             "use trainer.objective=opd_sampled with teacher.kind=server, or a local teacher")
        todo = unscored(samples, full=False)
        if not todo:
            return
        chunks = [todo[i : i + self.micro_batch] for i in range(0, len(todo), self.micro_batch)]
        if self.concurrency == 1 or len(chunks) == 1:
            results = [self._score_chunk(c) for c in chunks]
        else:
            with ThreadPoolExecutor(self.concurrency) as pool:
                results = list(pool.map(self._score_chunk, chunks))
        for chunk, logps in zip(chunks, results):
            for s, logp in zip(chunk, logps):
                s.teacher_logprobs = logp
                self.tokens_scored += s.num_tokens

    def check_tokenizer(self, tokenizer) -> None:
        """Refuse a server whose tokenizer does not give the student's ids for `tokenizer_probe(tokenizer)`."""
        probe = tokenizer_probe(tokenizer)
        body = {"model": self.model_name, "prompt": probe, "add_special_tokens": False}
        url = self.base_url.removesuffix("/v1") + "/tokenize"
        try:
            reply = self._post("/tokenize", body, url=url)
        except TeacherServerError as e:
            raise TeacherServerError(f"could not check the teacher server's tokenizer against the student's: {e}. "
                                     "A vLLM server answers POST /tokenize beside /v1") from e
        theirs, ours = reply.get("tokens"), tokenizer.encode(probe, add_special_tokens=False)
        if theirs == ours:
            return
        if not isinstance(theirs, list):
            raise TeacherServerError(f"{url} returned no token list: {str(reply)[:300]}")
        k = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        raise TeacherServerError(
            f"the teacher server ({self.model_name!r} at {self.base_url}) tokenizes differently from the student: "
            f"on a {len(probe)}-character probe it returned {len(theirs)} ids, the student's tokenizer {len(ours)}; "
            f"first difference at token {k}, around {probe_context(tokenizer, ours, k)!r} (server id "
            f"{theirs[k] if k < len(theirs) else 'none'}, student id {ours[k] if k < len(ours) else 'none'}). "
            "OPD scores the student's token ids with the teacher, so both must use one tokenizer")

    # ------------------------------------------------------------------ requests
    def _score_chunk(self, chunk: list[Sample]) -> list[torch.Tensor]:
        sequences = [list(s.context_ids) + s.response_ids.tolist() for s in chunk]
        body = {"model": self.model_name, "prompt": sequences, "max_tokens": 1, "prompt_logprobs": 0,
                "temperature": 1.0, "n": 1}
        reply = self._post("/completions", body)
        choices = reply.get("choices")
        if not isinstance(choices, list) or len(choices) != len(chunk):
            got = len(choices) if isinstance(choices, list) else "no"
            raise TeacherServerError(f"{self.base_url}/completions returned {got} choices for {len(chunk)} prompts: "
                                     f"{str(reply)[:300]}")
        out: list[torch.Tensor | None] = [None] * len(chunk)
        for pos, choice in enumerate(sorted(choices, key=lambda c: c.get("index", 0))):
            i = choice.get("index", pos)
            out[i] = self._response_logprobs(choice.get("prompt_logprobs"), sequences[i], len(chunk[i].context_ids))
        return out  # type: ignore[return-value]

    def _response_logprobs(self, entries, ids: list[int], prompt_len: int) -> torch.Tensor:
        if not isinstance(entries, list) or len(entries) != len(ids):
            raise TeacherServerError(
                f"expected prompt_logprobs for {len(ids)} tokens, got {type(entries).__name__}"
                f"{'' if not isinstance(entries, list) else f' of {len(entries)}'}; is {self.base_url} a vLLM server "
                "(prompt_logprobs is a vLLM extension of the completions API)?")
        values = []
        for j in range(prompt_len, len(ids)):
            entry = entries[j] or {}
            item = entry.get(str(ids[j]))
            if item is None:
                raise TeacherServerError(f"prompt_logprobs at position {j} lacks the token {ids[j]} (got keys "
                                         f"{list(entry)[:5]}); does the server use the student's tokenizer?")
            lp = item["logprob"] if isinstance(item, dict) else float(item)
            values.append(-math.inf if lp is None else float(lp))
        return torch.tensor(values, dtype=torch.float32)

    def _post(self, path: str, body: dict, url: str | None = None) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = url or self.base_url + path
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    self.requests_sent += 1
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:500]
                if e.code < 500:  # a bad request will not get better by retrying
                    raise TeacherServerError(f"teacher server {url} rejected the request (HTTP {e.code}): {detail}") from e
                last = TeacherServerError(f"teacher server {url} failed (HTTP {e.code}): {detail}")
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            if attempt < self.retries:
                time.sleep(min(30.0, 0.5 * 2 ** attempt))
        raise TeacherServerError(f"teacher server {url} unreachable after {self.retries + 1} attempts: {last}. "
                                 f"Start it with `vllm serve {self.model_name}` and check teacher.server_url") from last


def tokenizer_probe(tokenizer) -> str:
    """A text that exercises what OPD sends: a chat-templated math prompt and answer (digits, LaTeX,
    spaces, newlines, non-ASCII), every special and added token (EOS, chat and thinking markers)."""
    question = "Compute 12 + 345 * 6, then explain why (x^2 - 1) = (x - 1)(x + 1). Réponse : 2 070 ≈ 2.07e3"
    answer = "12 + 2070 = 2082.\n\nSo the answer is $\\boxed{2082}$."
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    text = f"{question}\n{answer}"
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    extra = list(dict.fromkeys([*tokenizer.all_special_tokens, *tokenizer.get_added_vocab()]))
    return text + " ".join(extra)


def probe_context(tokenizer, ids: list[int], k: int) -> str:
    return tokenizer.decode(ids[max(0, k - 4): k + 4])
