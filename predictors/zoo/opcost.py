"""Per-operator cost rules from tensor shapes: op class, forward/backward FLOPs, saved tensors.

``FlopCounterMode`` counts no FLOPs for CPU SDPA, norms or element-wise ops, so every rule here
works from shapes alone. Backward FLOPs: 2 x forward for ops with two gradients (conv, matmul, rnn:
input and weight / both operands), 2.5 x for attention (flash backward recomputes the scores),
1 x otherwise. No torch import: arguments are shape tuples.
"""

from __future__ import annotations

from math import prod

OP_CLASSES = ("conv", "matmul", "attention", "norm", "elementwise", "pool", "embedding", "rnn", "reduction",
              "other")

_CLASS_OF: dict[str, str] = {}
for _cls, _names in {
    "conv": "conv1d conv2d conv3d convolution conv_transpose1d conv_transpose2d conv_transpose3d",
    "matmul": "linear mm addmm bmm matmul baddbmm einsum addbmm",
    "attention": "scaled_dot_product_attention _scaled_dot_product_efficient_attention "
                 "_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu",
    "norm": "batch_norm layer_norm group_norm instance_norm native_batch_norm native_layer_norm "
            "_native_batch_norm_legit_functional _native_batch_norm_legit rms_norm",
    "pool": "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d "
            "adaptive_avg_pool2d adaptive_max_pool2d adaptive_max_pool1d max_pool2d_with_indices",
    "embedding": "embedding embedding_bag _embedding_bag",
    "rnn": "lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell",
    "reduction": "sum mean amax amin max min var std norm softmax log_softmax _softmax _log_softmax "
                 "cross_entropy_loss nll_loss mse_loss l1_loss binary_cross_entropy "
                 "binary_cross_entropy_with_logits smooth_l1_loss logsumexp argmax cumsum "
                 "nll_loss_nd prod var_mean",
    "elementwise": "add sub mul div relu relu_ gelu silu sigmoid tanh hardswish hardsigmoid hardtanh "
                   "leaky_relu elu dropout native_dropout neg exp log pow sqrt rsqrt where clone copy "
                   "_to_copy cat stack masked_fill add_ mul_ abs clamp maximum minimum square "
                   "upsample_nearest2d upsample_bilinear2d zeros_like ones_like full_like fill_ triu tril "
                   "mish softplus erf cos sin rsub reciprocal contiguous lt gt le ge eq ne logical_not "
                   "bitwise_not type_as to floor_divide remainder sign hardswish_ relu6 silu_ tanh_ "
                   "sigmoid_ gelu_ dropout_ pad constant_pad_nd baddbmm_ index_select gather roll "
                   "scatter flip repeat tile new_zeros new_ones zeros ones full arange linspace",
}.items():
    for _n in _names.split():
        _CLASS_OF[_n] = _cls

#: ops that only re-label memory (collapsed away when building graphs)
VIEW_OPS = frozenset(
    "view reshape flatten unflatten permute transpose t expand expand_as unsqueeze squeeze slice select "
    "getitem split split_with_sizes chunk unbind alias detach view_as narrow movedim as_strided "
    "_unsafe_view lift_fresh_copy sym_size unfold detach_".split()
)

#: ops whose backward needs their inputs (saved for backward)
_SAVES_INPUTS = frozenset(("conv", "matmul", "attention", "norm", "rnn", "pool", "reduction"))
#: element-wise ops whose backward needs their output or inputs
_SAVES_OUTPUT = frozenset(
    "relu relu_ gelu silu sigmoid tanh hardswish hardsigmoid hardtanh leaky_relu elu mish softplus exp "
    "sqrt rsqrt relu6 silu_ tanh_ sigmoid_ gelu_ hardswish_ softmax _softmax log_softmax".split()
)
_SAVES_INPUTS_ELEMENTWISE = frozenset("mul div pow where masked_fill mul_ maximum minimum square".split())
_TRANSCENDENTAL = frozenset("gelu silu sigmoid tanh hardswish mish softplus exp log erf elu softmax "
                            "log_softmax _softmax _log_softmax cross_entropy_loss".split())

Shape = tuple[int, ...]


def op_class(op: str) -> str:
    """The op class of an aten op name (``"conv2d"`` -> ``"conv"``); ``"other"`` when unknown."""
    return _CLASS_OF.get(op, "other")


def _numel(shape: Shape) -> int:
    return prod(shape) if shape else 1


def forward_flops(op: str, inputs: list[Shape], outputs: list[Shape], weights: list[Shape]) -> float:
    """Forward FLOPs (multiply-add = 2) of one op from its tensor input/output shapes.

    ``inputs`` are activation inputs, ``weights`` parameter inputs (in argument order).
    """
    cls = op_class(op)
    out = sum(_numel(s) for s in outputs)
    if cls == "conv" and weights:
        w = weights[0]
        if "transpose" in op and inputs:
            return 2.0 * _numel(inputs[0]) * _numel(w[1:])
        return 2.0 * out * _numel(w[1:])
    if cls == "matmul":
        if op == "linear" and weights:
            return 2.0 * out * weights[0][-1]
        left = [s for s in inputs if len(s) >= 2] or [s[::-1] for s in weights if len(s) >= 2]
        return 2.0 * out * left[0][-1] if left else 0.0
    if cls == "attention" and len(inputs) >= 3:
        q, k, v = inputs[:3]
        scores = _numel(q[:-1]) * k[-2]
        return 2.0 * scores * q[-1] + 2.0 * scores * v[-1] + 5.0 * scores
    if cls == "rnn":
        tokens = _numel(inputs[0][:-1]) if inputs else 0
        matrices = sum(_numel(w) for w in weights if len(w) == 2)
        return 2.0 * tokens * matrices + 10.0 * out
    if cls == "norm":
        return 5.0 * out
    if cls in ("pool", "reduction"):
        per = 4.0 if op in _TRANSCENDENTAL else 1.0
        return per * max(sum(_numel(s) for s in inputs), out)
    if cls == "elementwise":
        return (4.0 if op in _TRANSCENDENTAL else 1.0) * out
    return 0.0


def backward_factor(op: str) -> float:
    """Backward FLOPs as a multiple of forward FLOPs (see module docstring)."""
    cls = op_class(op)
    if cls in ("conv", "matmul", "rnn", "norm"):
        return 2.0
    if cls == "attention":
        return 2.5
    return 1.0


def saves_inputs(op: str) -> bool:
    """Whether backward needs this op's activation inputs."""
    return op_class(op) in _SAVES_INPUTS or op in _SAVES_INPUTS_ELEMENTWISE


def saves_output(op: str) -> bool:
    """Whether backward needs this op's output."""
    return op in _SAVES_OUTPUT or op_class(op) == "attention"
