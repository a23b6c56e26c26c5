"""Cost models of the ops transformer graphs add (Hugging Face BERT, GPT-2, Llama), against hand counts.

The shapes are the ones these ops have in ``examples/hf_models.py`` graphs
(batch 2, 4 heads, 16 tokens, head size 16). ``one_op`` is the single-op
graph of ``tests/test_flops.py``.
"""
from __future__ import annotations

import math

import pytest

from dlsched.profiling.flops import op_cost
from tests.test_flops import one_op

B, H, L, E = 2, 4, 16, 16
Q = [B, H, L, E]
SCORES = B * H * L * L


def test_flash_attention_forward():
    # QKᵀ and PV: 2·BH·L·S·E each; scale and softmax: 4 per score.
    _, c = one_op("aten._scaled_dot_product_flash_attention_for_cpu.default", [Q, Q, Q], Q)
    assert c.flops == 2 * SCORES * E + 2 * SCORES * E + 4 * SCORES == 139_264
    assert c.bytes == 4 * 4 * (B * H * L * E)  # q, k, v read, out written (float32)


def test_attention_with_other_key_length_and_value_size():
    # Cross-attention: 8 queries over 12 keys, values of size 24; an attention mask as the fourth input.
    q, k, v, mask = [1, 2, 8, 16], [1, 2, 12, 16], [1, 2, 12, 24], [1, 1, 8, 12]
    scores = 1 * 2 * 8 * 12
    _, c = one_op("aten.scaled_dot_product_attention.default", [q, k, v, mask], [1, 2, 8, 24])
    assert c.flops == 2 * scores * 16 + 2 * scores * 24 + 4 * scores
    # The symbolic-trace name (torch.nn.functional.scaled_dot_product_attention) gets the same count.
    _, d = one_op("scaled_dot_product_attention", [q, k, v, mask], [1, 2, 8, 24])
    assert d.flops == c.flops


def test_self_attention_on_one_tensor():
    # fx lists an input node once: q = k = v gives one input shape.
    _, c = one_op("aten._scaled_dot_product_flash_attention_for_cpu.default", [Q], Q)
    assert c.flops == 4 * SCORES * E + 4 * SCORES


def test_flash_attention_backward():
    # Inputs: grad_out, q, k, v, out, logsumexp; outputs: grad_q, grad_k, grad_v (the shapes of q, k, v).
    # QKᵀ recomputed, dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q: 5 products; 5 element-wise per score.
    g, _ = one_op("aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
                  [Q, Q, Q, Q, Q, [B, H, L]], Q)
    g.op("x").output_shapes = [Q, Q, Q]
    c = op_cost(g, g.op("x"))
    assert c.flops == 5 * 2 * SCORES * E + 5 * SCORES == 337_920
    assert c.flops / 139_264 == pytest.approx(2.43, abs=0.01)  # about 2.5× the forward: five products to two


def test_attention_without_shapes_is_not_costed():
    _, c = one_op("aten._scaled_dot_product_flash_attention_for_cpu.default", [], [])
    assert c is None


@pytest.mark.parametrize("op_type, per_element", [
    ("aten.bernoulli_.float", 2),   # dropout's mask: one draw, one compare
    ("aten.div_.Scalar", 1),        # dropout's rescale
    ("aten.tril.default", 1),       # GPT-2's causal mask: an index compare
    ("aten.sin.default", 1),        # Llama's rotary embedding
    ("aten.cos.default", 1),
])
def test_elementwise_ops_of_transformers(op_type, per_element):
    _, c = one_op(op_type, [[2, 16, 32]], [2, 16, 32])
    assert c.flops == per_element * 2 * 16 * 32
    assert c.bytes == 2 * 4 * 2 * 16 * 32


def test_safe_softmax():
    # Softmax's 3 per element, plus zeroing fully masked rows: 4 per input element.
    _, c = one_op("aten._safe_softmax.default", [[B, H, L, L]], [B, H, L, L])
    assert c.flops == 4 * SCORES


@pytest.mark.parametrize("op_type, ins, out", [
    ("aten.index.Tensor", [[2, 16, 64], [2]], [2, 64]),           # picking each sequence's last token
    ("aten.embedding.default", [[1000, 64], [2, 16]], [2, 16, 64]),
    ("GatherElements", [[2, 16], [2, 1]], [2, 1]),                 # ONNX, BERT's token-type ids
])
def test_gathers_move_the_picked_elements(op_type, ins, out):
    # The indices read, the picked elements read and written; not the whole source (1000×64 for the embedding).
    _, c = one_op(op_type, ins, out)
    assert c.flops == 0 and c.bytes == 4 * (math.prod(ins[1]) + 2 * math.prod(out))


@pytest.mark.parametrize("op_type", ["aten.full_like.default", "aten.new_ones.default"])
def test_tensor_factories_write_their_output(op_type):
    # A fill kernel: no FLOPs, the output written once (2·16 float32).
    _, c = one_op(op_type, [[2, 16]], [2, 16])
    assert (c.flops, c.bytes) == (0, 4 * 2 * 16)
