"""How a question becomes a prompt: the model's own chat template, as for every real model."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def render_question(
    tokenizer: PreTrainedTokenizerBase, question: str, instruction: str = "", enable_thinking: bool = False
) -> str:
    """The prompt text for `question` (with `instruction` appended in the user turn)."""
    content = f"{question}\n{instruction}".strip() if instruction else question
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )
