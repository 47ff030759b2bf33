"""torchrun --nproc_per_node=2: the trainer's evaluation pattern with rollout=vllm on an FSDP2 policy (gloo, CPU,
tests/test_vllm_gpu.FakeVLLM as the engine). Every rank calls model_for_scoring() after a weight sync, then rank
0 alone generates and scores through it, then all meet at a barrier; a 20 s group timeout turns a hang into a
failure. Rank 0 writes the scoring model's logits and the full model's to --out."""

import argparse
import copy
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_vllm_gpu import FakeVLLM  # noqa: E402

sys.modules["vllm"] = FakeVLLM()
torch.cuda.is_available = lambda: True  # VLLMGenerator insists on CUDA; the fake engine runs on the CPU
torch.cuda.current_device = lambda: 0
torch.set_num_threads(1)

from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from replaylab import parallel as D  # noqa: E402
from replaylab.rollout.base import SamplingParams  # noqa: E402
from replaylab.rollout.vllm import VLLMGenerator  # noqa: E402
from replaylab.types import Prompt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
out = Path(parser.parse_args().out)
dist.init_process_group("gloo", timeout=timedelta(seconds=20))
torch.manual_seed(0)
config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16)
full = Qwen3ForCausalLM(config).eval()
policy = D.wrap_model(copy.deepcopy(full), "fsdp2", "cpu")  # same seed, same weights on every rank


class Tok:
    eos_token_id = FakeVLLM.EOS


gen = VLLMGenerator("/unused", Tok())
gen.device = torch.device("cpu")
gen.sync_weights(policy, 1)  # what the trainer does after an update
scoring = gen.model_for_scoring()  # run_eval: every rank, then rank 0 alone
ids = torch.tensor([[1, 2, 5, 7, 9]])
if D.is_main():
    gen.generate([Prompt("u", "", (1, 2, 5), "0")], SamplingParams(4, 1.0), seed=0)
    with torch.no_grad():
        torch.save({"scoring": scoring(ids).logits, "full": full(ids).logits}, out / "logits.pt")
D.barrier()
dist.destroy_process_group()
