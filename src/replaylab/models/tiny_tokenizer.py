"""The tiny world's tokenizer: one token per character, built locally with `tokenizers`.

It is saved in transformers format with a Qwen-style chat template, so the tiny world's prompts go
through `tokenizer.apply_chat_template` exactly as a real model's do, and
`AutoTokenizer.from_pretrained(dir)` loads it like any hub tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
VOCAB_SIZE = 128  # embedding rows; the tokenizer uses the first 101, the rest are padding

# Qwen's template without tools; `enable_thinking` is accepted and ignored (the tiny world's
# solutions are their own reasoning), so callers pass the same kwargs as for Qwen3.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable + "\n"
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Special tokens are matched first by `tokenizers`; everything else splits into characters.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
