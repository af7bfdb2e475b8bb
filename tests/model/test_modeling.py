"""Tests that mirror modeling_vit_scratch.py, module by module, on tiny odd-sized configs."""

import logging

import pytest
import torch
from helpers import run_fresh, tiny_config
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from modeling_vit_scratch import (
    ViTScratchConfig,
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchImageProcessor,
    ViTScratchModel,
)
from modeling_vit_scratch import modeling_vit_scratch as modeling
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchAttention,
    ViTScratchDropPath,
    ViTScratchPatchEmbeddings,
    attention_kernel,
    cpu_bf16_units,
    log_kernel_choice,
    probe_cpu_bf16_units,
    sincos_position_table,
    truncated_normal_,
)


def images(config: ViTScratchConfig, batch: int = 2, size: tuple[int, int] | None = None) -> torch.Tensor:
    height, width = size or config.grid_size[0] * config.patch_size, config.grid_size[1] * config.patch_size
    if size:
        height, width = size
    return torch.randn(batch, config.num_channels, height, width)


def test_vit_base_16_has_the_papers_parameter_count():
    config = ViTScratchConfig.from_preset("vit-base-patch16-224", num_labels=1000)
    with torch.device("meta"):
        model = ViTScratchForImageClassification(config)
    assert sum(p.numel() for p in model.parameters()) == 86_567_656


def test_output_shapes(config):
    model = ViTScratchForImageClassification(config).eval()
    outputs = model(images(config, batch=3), output_hidden_states=True, output_attentions=True)
    tokens = 1 + 5 * 5
    assert outputs.logits.shape == (3, 5)
    assert len(outputs.hidden_states) == config.num_hidden_layers + 1
    assert all(h.shape == (3, tokens, 36) for h in outputs.hidden_states)
    assert all(a.shape == (3, 3, tokens, tokens) for a in outputs.attentions)
    base = ViTScratchModel(config)(images(config))
    assert base.last_hidden_state.shape == (2, tokens, 36) and base.pooler_output.shape == (2, 36)


def test_eager_and_sdpa_agree_and_attention_rows_sum_to_one(config):
    eager = ViTScratchForImageClassification(tiny_config(attn_implementation="eager")).eval()
    sdpa = ViTScratchForImageClassification(tiny_config(attn_implementation="sdpa")).eval()
    assert (eager.config._attn_implementation, sdpa.config._attn_implementation) == ("eager", "sdpa")
    sdpa.load_state_dict(eager.state_dict())
    pixel_values = images(config, batch=4)
    torch.testing.assert_close(sdpa(pixel_values).logits, eager(pixel_values).logits, atol=1e-5, rtol=0)
    attentions = eager(pixel_values, output_attentions=True).attentions
    for weights in attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights >= 0).all()


def test_sdpa_model_returns_the_same_attention_maps_as_eager(config):
    """Fused kernels return no weights; asking for them runs the explicit path, with the same result."""
    eager = ViTScratchForImageClassification(tiny_config(attn_implementation="eager")).eval()
    sdpa = ViTScratchForImageClassification(tiny_config(attn_implementation="sdpa")).eval()
    sdpa.load_state_dict(eager.state_dict())
    pixel_values = images(config)
    for ours, reference in zip(
        sdpa(pixel_values, output_attentions=True).attentions, eager(pixel_values, output_attentions=True).attentions
    ):
        torch.testing.assert_close(ours, reference, atol=1e-6, rtol=0)
    assert sdpa.config._attn_implementation == "sdpa"


class FusedAttentionCalls(torch.overrides.TorchFunctionMode):
    """Counts the calls of torch's fused attention kernel made inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.nn.functional.scaled_dot_product_attention
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("device", "dtype", "needs_grad", "units", "expected"),
    [
        ("cuda", torch.bfloat16, False, "none", "fused"),
        ("cuda", torch.bfloat16, True, "avx512_bf16", "fused"),
        ("mps", torch.float16, True, "none", "fused"),
        *[
            ("cpu", dtype, grad, units, "fused")
            for dtype in (torch.float32, torch.float16)
            for grad in (False, True)
            for units in ("none", "avx512_bf16", "amx")
        ],
        ("cpu", torch.bfloat16, False, "amx", "fused"),
        ("cpu", torch.bfloat16, True, "amx", "explicit"),
        ("cpu", torch.bfloat16, False, "avx512_bf16", "explicit"),
        ("cpu", torch.bfloat16, True, "avx512_bf16", "explicit"),
        ("cpu", torch.bfloat16, False, "none", "fused"),
        ("cpu", torch.bfloat16, True, "none", "fused"),
    ],
)
def test_attention_kernel_follows_the_device_dtype_direction_and_cpu(device, dtype, needs_grad, units, expected):
    """The rule's table (attention_kernel's docstring): fused everywhere but bf16 on a CPU with bf16 units, where AMX
    runs the fused kernel for inference only and AVX-512 BF16 runs the explicit path both ways."""
    assert attention_kernel(device, dtype, needs_grad, units) == expected


def test_cpu_bf16_units_reads_the_cpu_once_through_torch():
    assert cpu_bf16_units() in ("amx", "avx512_bf16", "none")
    assert cpu_bf16_units() == probe_cpu_bf16_units() and probe_cpu_bf16_units.cache_info().currsize == 1


def run_with_faked_cpu(monkeypatch, units, precision, direction, implementation="sdpa"):
    """(fused-kernel calls, logits, the eager model's logits, the model, the eager model) for a model run as
    `precision` in `direction` on a CPU whose bf16 units read `units`; the eager model holds the same weights."""
    monkeypatch.setattr(modeling, "cpu_bf16_units", lambda: units)
    eager = ViTScratchForImageClassification(tiny_config(attn_implementation="eager")).eval()
    model = ViTScratchForImageClassification(tiny_config(attn_implementation=implementation)).eval()
    model.load_state_dict(eager.state_dict())
    weights = {"bf16-weights": torch.bfloat16, "float16": torch.float16}.get(precision)
    if weights:
        eager, model = eager.to(weights), model.to(weights)
    pixel_values = images(model.config, batch=4)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast")
    with torch.set_grad_enabled(direction == "training"), autocast():
        with FusedAttentionCalls() as fused:
            logits = model(pixel_values).logits
        expected = eager(pixel_values).logits
    return fused.calls, logits, expected, model, eager


@pytest.mark.parametrize("units", ["none", "avx512_bf16", "amx"])
@pytest.mark.parametrize("precision", ["bf16-weights", "bf16-autocast", "float16", "float32"])
@pytest.mark.parametrize("direction", ["inference", "training"])
def test_sdpa_model_runs_the_kernel_the_rule_picks(monkeypatch, units, precision, direction):
    """With the CPU's bf16 units faked, an sdpa model calls torch's fused kernel in each block exactly where
    `attention_kernel` says so, and computes what the eager model does: the same bits on the explicit path."""
    calls, logits, expected, model, _ = run_with_faked_cpu(monkeypatch, units, precision, direction)
    dtype = torch.float32 if precision == "float32" else torch.float16 if precision == "float16" else torch.bfloat16
    kernel = attention_kernel("cpu", dtype, direction == "training", units)
    assert calls == (model.config.num_hidden_layers if kernel == "fused" else 0)
    assert logits.dtype == dtype and logits.requires_grad == (direction == "training")
    if kernel == "explicit":
        assert torch.equal(logits, expected)
    else:
        tolerance = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}[dtype]
        torch.testing.assert_close(logits, expected, atol=tolerance, rtol=0)


def test_training_on_amx_backpropagates_through_the_explicit_path(monkeypatch):
    """On AMX, bf16 training runs the explicit path (its backward is the faster one): the gradients are eager's."""
    calls, logits, expected, model, eager = run_with_faked_cpu(monkeypatch, "amx", "bf16-weights", "training")
    assert calls == 0
    logits.float().sum().backward()
    expected.float().sum().backward()
    gradients = dict(eager.named_parameters())
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter.grad, gradients[name].grad), name


@pytest.mark.parametrize(
    ("implementation", "units", "expected_calls"), [("eager", "amx", 0), ("fused_sdpa", "avx512_bf16", 2)]
)
def test_attn_implementation_overrides_the_rule(monkeypatch, implementation, units, expected_calls):
    """ "eager" forces the explicit path (even for bf16 inference on AMX); transformers' SDPA function registered under
    another name in transformers' AttentionInterface forces the fused kernel (even in bf16 on AVX-512 BF16)."""
    monkeypatch.setitem(AttentionInterface._global_mapping, "fused_sdpa", sdpa_attention_forward)
    calls, logits, expected, model, _ = run_with_faked_cpu(
        monkeypatch, units, "bf16-weights", "inference", implementation
    )
    assert model.config._attn_implementation == implementation
    assert calls == expected_calls
    torch.testing.assert_close(logits, expected, atol=5e-2, rtol=0)


def test_the_kernel_choice_is_logged_once_per_dtype_and_direction(monkeypatch, caplog):
    log_kernel_choice.cache_clear()
    with caplog.at_level(logging.DEBUG, logger=modeling.__name__):
        for _ in range(2):
            run_with_faked_cpu(monkeypatch, "amx", "bf16-weights", "inference")
            run_with_faked_cpu(monkeypatch, "amx", "bf16-weights", "training")
    lines = [record.getMessage() for record in caplog.records if record.name == modeling.__name__]
    assert lines == [
        "sdpa attention on cpu in torch.bfloat16 for inference, CPU bf16 units: amx: the fused kernel",
        "sdpa attention on cpu in torch.bfloat16 for training (gradients), CPU bf16 units: amx: the explicit kernel",
    ]


def test_attention_matches_the_written_out_equation():
    config = tiny_config(attn_implementation="eager")
    attention = ViTScratchAttention(config).eval()
    x = torch.randn(2, 7, 36)
    q, k, v = attention.qkv_proj(x).split(36, dim=-1)
    heads = lambda t: t.view(2, 7, 3, 12).transpose(1, 2)
    weights = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / 12**0.5, dim=-1)
    expected = attention.o_proj((weights @ heads(v)).transpose(1, 2).reshape(2, 7, 36))
    output, returned_weights = attention(x, output_attentions=True)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(returned_weights, weights)


def test_conv_and_linear_patch_embeddings_are_the_same_function():
    conv = ViTScratchPatchEmbeddings(tiny_config(patch_embedding="conv"))
    linear = ViTScratchPatchEmbeddings(tiny_config(patch_embedding="linear"))
    linear.projection.weight.data = conv.projection.weight.data.reshape(36, -1)  # (D, C, P, P) -> (D, C*P*P)
    linear.projection.bias.data = conv.projection.bias.data
    pixel_values = torch.randn(2, 3, 20, 20)
    torch.testing.assert_close(linear(pixel_values), conv(pixel_values))


def test_every_option_builds_runs_and_trains():
    for overrides in (
        dict(pooling="mean"),
        dict(position_embedding="sincos"),
        dict(patch_embedding="linear"),
        dict(qkv_bias=False),
        dict(num_channels=1),
        dict(image_size=(20, 28)),
        dict(drop_path_rate=0.2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    ):
        config = tiny_config(**overrides)
        model = ViTScratchForImageClassification(config).train()
        output = model(images(config, size=tuple(i * 4 for i in config.grid_size)), labels=torch.tensor([0, 4]))
        output.loss.backward()
        assert torch.isfinite(output.loss), overrides
        missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert not missing, (overrides, missing)


def test_qkv_bias_and_pooling_change_the_model():
    assert ViTScratchAttention(tiny_config(qkv_bias=False)).qkv_proj.bias is None
    model = ViTScratchModel(tiny_config(pooling="mean")).eval()
    output = model(images(model.config))
    torch.testing.assert_close(output.pooler_output, output.last_hidden_state[:, 1:].mean(1))
    cls_model = ViTScratchModel(tiny_config()).eval()
    output = cls_model(images(cls_model.config))
    torch.testing.assert_close(output.pooler_output, output.last_hidden_state[:, 0])


def test_layer_norm_eps_and_initializer_range_reach_the_modules():
    model = ViTScratchModel(tiny_config(layer_norm_eps=1e-3, initializer_range=0.2))
    assert model.layernorm.eps == 1e-3 and model.layers[0].layernorm_before.eps == 1e-3
    weight = model.layers[0].mlp.fc1.weight
    assert 0.17 < weight.std() < 0.23  # N(0, 0.2^2): the cut at +-2 is 10 std out
    assert ViTScratchModel(tiny_config()).layers[0].mlp.fc1.weight.std() < 0.03


def test_truncated_normal_cuts_at_two_absolute_like_the_reference_and_keeps_loaded_tensors():
    torch.manual_seed(0)
    sample = truncated_normal_(torch.empty(200_000), std=1.0)
    assert sample.abs().max() <= 2.0 and sample.abs().max() > 1.99
    # N(0, 1) cut at +-2: standard deviation 0.8796, 95.45% of the untruncated mass inside +-2
    assert sample.mean().abs() < 0.01 and sample.std() == pytest.approx(0.8796, rel=0.01)
    assert (sample.abs() < 1.0).float().mean() == pytest.approx(0.6827 / 0.9545, abs=0.005)  # inside 1 std
    # std 0.02 (ViT's initializer_range): the cut at +-2 is 100 std out, the sample is N(0, 0.02^2) like torch's own
    small = truncated_normal_(torch.empty(200_000), std=0.02)
    reference = torch.nn.init.trunc_normal_(torch.empty(200_000), std=0.02)
    assert small.std() == pytest.approx(0.02, rel=0.01)
    assert small.std() == pytest.approx(reference.std().item(), rel=0.01)
    assert torch.isfinite(small).all() and small.abs().max() < 0.2
    loaded = torch.full((3,), 7.0)
    loaded._is_hf_initialized = True
    assert truncated_normal_(loaded, std=0.5).tolist() == [7.0] * 3


def test_drop_path_rates_grow_with_depth_and_only_act_in_training():
    model = ViTScratchModel(tiny_config(num_hidden_layers=3, drop_path_rate=0.2))
    assert isinstance(model.layers[0].drop_path, torch.nn.Identity)
    assert [layer.drop_path.rate for layer in model.layers[1:]] == pytest.approx([0.1, 0.2])
    drop = ViTScratchDropPath(0.5)
    branch = torch.ones(1000, 3, 4)
    dropped = drop.train()(branch)
    per_sample = dropped[:, 0, 0]
    assert set(per_sample.unique().tolist()) == {0.0, 2.0}  # whole samples dropped, survivors rescaled
    assert torch.equal(drop.eval()(branch), branch)


def test_hidden_dropout_changes_training_outputs_only():
    config = tiny_config(hidden_dropout_prob=0.5)
    model = ViTScratchForImageClassification(config)
    pixel_values = images(config)
    assert not torch.equal(model.train()(pixel_values).logits, model(pixel_values).logits)
    model.eval()
    assert torch.equal(model(pixel_values).logits, model(pixel_values).logits)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(config):
    model = ViTScratchForImageClassification(config).train()
    pixel_values, labels = images(config), torch.tensor([1, 3])
    reference_loss = model(pixel_values, labels=labels).loss
    reference_loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    assert model.vit.layers[0].gradient_checkpointing
    loss = model(pixel_values, labels=labels).loss
    loss.backward()
    torch.testing.assert_close(loss, reference_loss)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, reference[name], msg=name)


def test_interpolate_pos_encoding_runs_other_resolutions(config):
    model = ViTScratchForImageClassification(config).eval()
    for size in ((32, 32), (20, 28), (12, 40)):
        assert model(images(config, size=size), interpolate_pos_encoding=True).logits.shape == (2, 5)
    same_size = images(config)
    torch.testing.assert_close(model(same_size, interpolate_pos_encoding=True).logits, model(same_size).logits)


def test_learned_positions_resample_from_the_stored_non_square_grid():
    model = ViTScratchModel(tiny_config(image_size=(8, 20)))  # a 2 x 5 grid: sqrt(10) is no side
    table = model.embeddings.position_embeddings_for((4, 10))
    assert table.shape == (1, 1 + 40, 36)
    torch.testing.assert_close(table[:, 0], model.embeddings.position_embeddings[:, 0])  # class token untouched


def test_sincos_positions_are_the_table_at_any_grid():
    model = ViTScratchModel(tiny_config(position_embedding="sincos"))
    assert "embeddings.position_embeddings" not in model.state_dict()  # fixed, not state
    torch.testing.assert_close(model.embeddings.position_embeddings_for((3, 7)), sincos_position_table((3, 7), 36))
    table = sincos_position_table((2, 3), 8)
    assert table.shape == (1, 7, 8) and torch.equal(table[0, 0], torch.zeros(8))
    assert torch.equal(table[0, 1, :2], torch.zeros(2)) and torch.equal(table[0, 1, 2:4], torch.ones(2))


def test_sincos_table_is_refilled_after_loading(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(position_embedding="sincos")).eval()
    model.save_pretrained(tmp_path)
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded.vit.embeddings.position_embeddings, sincos_position_table((5, 5), 36))
    pixel_values = images(model.config)
    torch.testing.assert_close(loaded(pixel_values).logits, model(pixel_values).logits)


@pytest.mark.parametrize(
    "pixel_values, kwargs, message",
    [
        (torch.randn(2, 1, 20, 20), {}, "have 1 channels but the model expects 3"),
        (torch.randn(2, 4, 20, 20), {}, "have 4 channels but the model expects 3"),
        (
            torch.randn(2, 3, 24, 24),
            {},
            "Image size 24x24 does not match the model's 20x20.*interpolate_pos_encoding=True",
        ),
        (torch.randn(2, 3, 21, 24), dict(interpolate_pos_encoding=True), "must be divisible by the patch size 4x4"),
        (torch.randn(3, 20, 20), {}, "must have shape \\(batch, channels, height, width\\), got \\(3, 20, 20\\)"),
    ],
)
def test_bad_input_gets_a_clear_value_error(config, pixel_values, kwargs, message):
    model = ViTScratchForImageClassification(config)
    with pytest.raises(ValueError, match=message):
        model(pixel_values, **kwargs)


def test_loss_is_cross_entropy_and_tuples_are_returned_on_request(config):
    model = ViTScratchForImageClassification(config).eval()
    pixel_values, labels = images(config), torch.tensor([0, 2])
    output = model(pixel_values, labels=labels)
    torch.testing.assert_close(output.loss, torch.nn.functional.cross_entropy(output.logits, labels))
    loss, logits = model(pixel_values, labels=labels, return_dict=False)
    torch.testing.assert_close(loss, output.loss)
    torch.testing.assert_close(logits, output.logits)


def test_bfloat16_model_accepts_float32_pixels(config):
    model = ViTScratchForImageClassification(config).to(torch.bfloat16).eval()
    assert model(images(config)).logits.dtype == torch.bfloat16


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mixed_precision_autocast_trains_and_stays_close_to_float32(kernel, dtype):
    model = ViTScratchForImageClassification(tiny_config(attn_implementation=kernel))
    pixel_values, labels = images(model.config, batch=4), torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        expected = model(pixel_values).logits
    with torch.autocast("cpu", dtype=dtype):
        output = model(pixel_values, labels=labels)
    assert output.logits.dtype == dtype  # the head's matmul ran in low precision
    torch.testing.assert_close(output.logits.float(), expected, atol=0.05, rtol=0.05)
    output.loss.backward()
    gradients = [parameter.grad for parameter in model.parameters()]
    assert all(
        gradient is not None and gradient.dtype == torch.float32 and gradient.isfinite().all() for gradient in gradients
    )


def test_classifier_computes_only_the_class_token_in_the_last_block_with_the_same_result(config):
    model = ViTScratchForImageClassification(config).eval()
    pixel_values = images(config, batch=3)
    full = model.vit(pixel_values)
    short, _, _ = model.vit.forward_features(pixel_values, class_token_only=True)
    assert (full.last_hidden_state.shape[1], short.shape[1]) == (26, 1)  # the base model's output keeps every token
    torch.testing.assert_close(model.vit.pool(short), full.pooler_output, atol=1e-6, rtol=0)
    torch.testing.assert_close(model(pixel_values).logits, model.classifier(full.pooler_output), atol=1e-6, rtol=0)
    # what needs every token gets every token
    every, _, _ = model.vit.forward_features(pixel_values, class_token_only=True, output_hidden_states=True)
    assert every.shape[1] == 26
    mean_pooled = ViTScratchModel(tiny_config(pooling="mean")).eval()
    assert mean_pooled.forward_features(pixel_values, class_token_only=True)[0].shape[1] == 26


def test_class_token_only_training_gives_the_same_gradients(config):
    model = ViTScratchForImageClassification(config)
    pixel_values, labels = images(config, batch=3), torch.tensor([0, 1, 2])
    model(pixel_values, labels=labels).loss.backward()
    short = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad()
    full = model.vit(pixel_values).pooler_output
    torch.nn.functional.cross_entropy(model.classifier(full), labels).backward()
    for ours, reference in zip(short, (parameter.grad for parameter in model.parameters())):
        torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-5)


# Bounds on |logit - float32 logit| for the tiny config: the largest difference over 5 seeds and both position
# embeddings, with a margin; bfloat16 keeps 8 bits of mantissa to float16's 11, so its bound is the looser one.
HALF_PRECISION_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 1e-2}


def assert_every_tensor_is(model, dtype):
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    assert {name: t.dtype for name, t in tensors.items() if t.dtype != dtype} == {}


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_pretrained_in_half_precision_runs_close_to_float32(tmp_path, position_embedding, dtype):
    """Every parameter and buffer (the sincos table too) in `dtype`; logits within HALF_PRECISION_TOLERANCE."""
    model = ViTScratchForImageClassification(tiny_config(position_embedding=position_embedding)).eval()
    model.save_pretrained(tmp_path)
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path, dtype=dtype).eval()
    assert_every_tensor_is(loaded, dtype)
    pixel_values = images(model.config, batch=4)
    with torch.no_grad():
        logits, expected = loaded(pixel_values).logits, model(pixel_values).logits
    assert logits.dtype == dtype
    torch.testing.assert_close(logits.float(), expected, atol=HALF_PRECISION_TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
def test_a_bfloat16_saved_folder_loads_in_bfloat16_by_default_and_with_dtype_auto(tmp_path, position_embedding):
    model = ViTScratchForImageClassification(tiny_config(position_embedding=position_embedding)).eval()
    pixel_values = images(model.config)
    with torch.no_grad():
        expected = model(pixel_values).logits
        model.save_pretrained(tmp_path / "float32")
        model.to(torch.bfloat16).save_pretrained(tmp_path / "bfloat16")
        for folder, kwargs, dtype in (
            ("bfloat16", {}, torch.bfloat16),
            ("bfloat16", {"dtype": "auto"}, torch.bfloat16),
            ("float32", {"dtype": "auto"}, torch.float32),
        ):
            loaded = ViTScratchForImageClassification.from_pretrained(tmp_path / folder, **kwargs).eval()
            assert_every_tensor_is(loaded, dtype)
            atol = HALF_PRECISION_TOLERANCE.get(dtype, 1e-6)
            torch.testing.assert_close(loaded(pixel_values).logits.float(), expected, atol=atol, rtol=0)


@pytest.mark.parametrize("model_class", [ViTScratchModel, ViTScratchForImageClassification])
def test_input_embeddings_hook_lets_reentrant_checkpointing_train_a_frozen_model(model_class):
    """What peft does: freeze the model, train an adapter inside it, with reentrant gradient checkpointing. The
    checkpointed blocks see a first activation that requires grad only through `enable_input_require_grads`'s hook
    on `get_input_embeddings()`."""
    model = model_class(tiny_config()).train()
    assert model.get_input_embeddings() is model.base_model.embeddings.patch_embeddings
    model.enable_input_require_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.requires_grad_(False)
    trained = model.base_model.layers[0].attention.qkv_proj.weight
    trained.requires_grad_(True)
    output = model(images(model.config))
    (output.logits if model_class is ViTScratchForImageClassification else output.last_hidden_state).sum().backward()
    assert trained.grad is not None and trained.grad.abs().sum() > 0


# DeiT's distillation token: a second prefix token, read by a second head


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
def test_the_distillation_token_follows_the_class_token_with_its_own_position(position_embedding):
    config = tiny_config(distillation_token=True, position_embedding=position_embedding)
    model = ViTScratchModel(config).eval()
    embeddings = model.embeddings
    assert config.num_prefix_tokens == 2 and embeddings.position_embeddings.shape == (1, 2 + 25, 36)
    tokens = embeddings(images(config))
    patches = embeddings.patch_embeddings(images(config))
    assert tokens.shape == (2, 27, 36)
    expected = embeddings.distillation_token[0] + embeddings.position_embeddings[:, 1]  # (1, D)
    torch.testing.assert_close(tokens[:, 1], expected.expand(2, -1))
    assert not torch.equal(embeddings.cls_token, embeddings.distillation_token)  # both drawn, not zero or shared
    resampled = embeddings.position_embeddings_for((4, 6))
    assert resampled.shape == (1, 2 + 24, 36)
    torch.testing.assert_close(resampled[:, :2], embeddings.position_embeddings[:, :2])  # both prefix rows kept
    assert patches.shape == (2, 25, 36)


def test_two_heads_read_the_class_and_distillation_tokens_and_predict_with_their_mean():
    config = tiny_config(distillation_token=True)
    model = ViTScratchForImageClassificationWithTeacher(config).eval()
    pixel_values, labels = images(config, batch=3), torch.tensor([0, 1, 4])
    tokens = model.vit(pixel_values).last_hidden_state  # (3, 2 + 25, 36), every token
    output = model(pixel_values, labels=labels)
    cls_logits, distillation_logits = model.classifier(tokens[:, 0]), model.distillation_classifier(tokens[:, 1])
    torch.testing.assert_close(output.cls_logits, cls_logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(output.distillation_logits, distillation_logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(output.logits, (cls_logits + distillation_logits) / 2, atol=1e-6, rtol=0)
    cross_entropy = torch.nn.functional.cross_entropy
    expected_loss = (cross_entropy(cls_logits, labels) + cross_entropy(distillation_logits, labels)) / 2
    torch.testing.assert_close(output.loss, expected_loss, atol=1e-6, rtol=0)
    # the single-head classifier of the same config reads the class token only
    single = ViTScratchForImageClassification(config).eval()
    single.load_state_dict(model.state_dict(), strict=False)
    torch.testing.assert_close(single(pixel_values).logits, cls_logits, atol=1e-6, rtol=0)


def test_the_two_headed_classifier_needs_a_distillation_token(config):
    with pytest.raises(ValueError, match="set distillation_token=True"):
        ViTScratchForImageClassificationWithTeacher(config)


@pytest.mark.slow
@pytest.mark.integration
def test_a_distilled_folder_loads_its_two_heads_through_the_auto_class_or_the_class_head_alone(tmp_path):
    from transformers import AutoModelForImageClassification

    config = tiny_config(distillation_token=True)
    model = ViTScratchForImageClassificationWithTeacher(config).eval()
    model.save_pretrained(tmp_path)
    ViTScratchImageProcessor(size={"height": 20, "width": 20}).save_pretrained(tmp_path)
    pixel_values = images(config)
    expected = model(pixel_values)
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert type(loaded).__name__ == "ViTScratchForImageClassificationWithTeacher"
    torch.testing.assert_close(loaded(pixel_values).logits, expected.logits, atol=0, rtol=0)
    # with its own code, in a process where the package is absent (pipeline included)
    fresh = run_fresh(tmp_path, pixel_values, tmp_path / "fresh")
    torch.testing.assert_close(fresh["logits"], expected.logits, atol=0, rtol=0)
    assert len(fresh["pipeline"]) == 5
    class_head = ViTScratchForImageClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(class_head(pixel_values).logits, expected.cls_logits, atol=0, rtol=0)
