"""Hugging Face ``transformers`` models as dlsched factories (third-party code, not written for dlsched).

Each factory builds its model from a config with random weights (a fixed
seed) and returns ``(module, (input_ids,))``, the contract of dlsched's MODEL
argument ``examples/hf_models.py:bert`` (``vit`` returns ``(module, (images,))``). Nothing is downloaded: no weights, no
tokenizer (the token ids come from :func:`torch.randint`), and the hub is
switched off for the process.

The configs are small (2 layers, hidden size 64, a 1,000-token vocabulary) so
that the test corpus runs in seconds on two CPU cores; the architectures are
the stock ones, so the captured graphs have the ops of the full-size models:

- ``bert``: ``BertForSequenceClassification`` (2-class logits)
- ``gpt2``: ``GPT2LMHeadModel`` (its LM head is tied to the token embedding)
- ``llama``: ``LlamaForCausalLM`` (grouped-query attention, RoPE, SwiGLU)
- ``mixtral``, ``qwen2_moe``: ``MixtralForCausalLM`` and ``Qwen2MoeForCausalLM``,
  mixtures of 4 experts with 2 per token (their CPU expert kernel,
  ``grouped_mm``, has no fake-tensor rule for float32, so the importer traces
  them with real tensors, twice, and checks that both traces agree)
- ``vit``: ``ViTForImageClassification`` on 32×32 images in 8×8 patches; and
  ``vit_base``, the same at ViT-B/16 sizes (12 layers, hidden size 768, 224×224
  images in 16×16 patches, 1,000 classes: 86.6 M parameters), for memory plans

Symbolic torch.fx tracing fails on all three, so dlsched captures them at the
aten level with ``make_fx`` in both modes (see
:mod:`dlsched.importers.torch_importer`).

Example
-------
>>> module, (ids,) = bert(batch=2)      # doctest: +SKIP
>>> tuple(ids.shape)                    # doctest: +SKIP
(2, 16)
"""
from __future__ import annotations

import os

# Set before transformers is imported: it reads them once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

VOCAB = 1000
SEQ_LEN = 16
# One small shape shared by the three models.
_SIZE = dict(layers=2, hidden=64, heads=4, ffn=256, positions=64)


def _token_ids(batch: int, seq_len: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (batch, seq_len), generator=g)


def bert(batch: int = 2, seq_len: int = SEQ_LEN):
    """``BertForSequenceClassification``, 2 layers of hidden size 64, on ``batch × seq_len`` token ids."""
    from transformers import BertConfig, BertForSequenceClassification

    s = _SIZE
    config = BertConfig(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                        num_attention_heads=s["heads"], intermediate_size=s["ffn"],
                        max_position_embeddings=s["positions"], num_labels=2)
    torch.manual_seed(0)
    return BertForSequenceClassification(config), (_token_ids(batch, seq_len),)


def gpt2(batch: int = 2, seq_len: int = SEQ_LEN):
    """``GPT2LMHeadModel``, 2 layers of width 64, on ``batch × seq_len`` token ids."""
    from transformers import GPT2Config, GPT2LMHeadModel

    s = _SIZE
    # bos/eos default to GPT-2's 50256, outside this vocabulary.
    config = GPT2Config(vocab_size=VOCAB, n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                        n_inner=s["ffn"], n_positions=s["positions"], bos_token_id=VOCAB - 1,
                        eos_token_id=VOCAB - 1)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config), (_token_ids(batch, seq_len),)


def llama(batch: int = 2, seq_len: int = SEQ_LEN):
    """``LlamaForCausalLM``, 2 layers of hidden size 64, 4 query heads sharing 2 key/value heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    s = _SIZE
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s["ffn"],
                         num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=2,
                         max_position_embeddings=s["positions"], bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config), (_token_ids(batch, seq_len),)


def mixtral(batch: int = 2, seq_len: int = SEQ_LEN):
    """``MixtralForCausalLM``: llama's attention, a sparse mixture of 4 experts, 2 per token."""
    from transformers import MixtralConfig, MixtralForCausalLM

    s = _SIZE
    config = MixtralConfig(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s["ffn"] // 2,
                           num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=2,
                           num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=s["positions"])
    torch.manual_seed(0)
    return MixtralForCausalLM(config), (_token_ids(batch, seq_len),)


def qwen2_moe(batch: int = 2, seq_len: int = SEQ_LEN):
    """``Qwen2MoeForCausalLM``: 4 routed experts (2 per token) beside a gated shared expert."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    s = _SIZE
    config = Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s["ffn"] // 2,
                            moe_intermediate_size=32, shared_expert_intermediate_size=s["hidden"],
                            num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=2,
                            num_experts=4, num_experts_per_tok=2, max_position_embeddings=s["positions"])
    torch.manual_seed(0)
    return Qwen2MoeForCausalLM(config), (_token_ids(batch, seq_len),)


def vit(batch: int = 2, image_size: int = 32, patch_size: int = 8, layers: int | None = None,
        hidden: int | None = None, heads: int | None = None, ffn: int | None = None, num_labels: int = 10):
    """``ViTForImageClassification`` on ``batch × 3 × image_size²`` images (default: the small shape)."""
    from transformers import ViTConfig, ViTForImageClassification

    s = _SIZE
    config = ViTConfig(image_size=image_size, patch_size=patch_size, hidden_size=hidden or s["hidden"],
                       num_hidden_layers=layers or s["layers"], num_attention_heads=heads or s["heads"],
                       intermediate_size=ffn or s["ffn"], num_labels=num_labels)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, image_size, image_size, generator=torch.Generator().manual_seed(1))
    return ViTForImageClassification(config), (images,)


def vit_base(batch: int = 2):
    """ViT-B/16: ``vit`` at 224×224 in 16×16 patches, 12 layers of hidden size 768, 1,000 classes."""
    return vit(batch, image_size=224, patch_size=16, layers=12, hidden=768, heads=12, ffn=3072, num_labels=1000)


FACTORIES = {"bert": bert, "gpt2": gpt2, "llama": llama, "mixtral": mixtral, "qwen2_moe": qwen2_moe, "vit": vit,
             "vit_base": vit_base}
