"""torch.compile: the model compiles as one graph (no graph breaks), forward and backward, with the same logits."""

import pytest
import torch

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch import modeling_vit_scratch as modeling


@pytest.mark.integration
def test_compiled_model_is_one_graph_and_computes_the_same(config):
    model = ViTScratchForImageClassification(config).eval()
    images, labels = torch.randn(4, 3, 20, 20), torch.tensor([0, 1, 2, 3])
    expected = model(images, labels=labels)
    # graph capture and the traced backward (aot_eager): a break raises instead of falling back; the code inductor
    # would generate from that graph is torch's to test
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    outputs = compiled(images, labels=labels)
    assert (outputs.logits - expected.logits).abs().max() < 1e-5
    assert (outputs.loss - expected.loss).abs() < 1e-5
    outputs.loss.backward()
    assert all(parameter.grad is not None for parameter in model.parameters())


@pytest.fixture
def fresh_compiler():
    """The CPU probe is a constant to the compiler: graphs traced for another (faked) CPU must not be reused."""
    torch.compiler.reset()
    yield
    torch.compiler.reset()


@pytest.mark.integration
@pytest.mark.parametrize("units", ["none", "avx512_bf16", "amx"])
@pytest.mark.parametrize("training", [False, True])
def test_the_attention_kernel_choice_compiles_as_one_graph_in_bf16(
    config, monkeypatch, fresh_compiler, units, training
):
    """The CPU probe and the direction are read while tracing: no graph break, whichever kernel the rule picks, and
    the logits of the kernel it picks."""
    monkeypatch.setattr(modeling, "cpu_bf16_units", torch.compiler.assume_constant_result(lambda: units))
    model = ViTScratchForImageClassification(config).to(torch.bfloat16).train(training)
    images = torch.randn(4, 3, 20, 20, dtype=torch.bfloat16)
    with torch.set_grad_enabled(training):
        expected = model(images).logits
        compiled = torch.compile(model, fullgraph=True, backend="eager")  # graph capture only: a break raises
        logits = compiled(images).logits
    assert torch.equal(logits, expected)
    if training:
        logits.float().sum().backward()
        assert all(parameter.grad is not None for parameter in model.parameters())
